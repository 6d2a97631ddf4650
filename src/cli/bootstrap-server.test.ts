/**
 * The bootstrap server as `run` builds it from a kops config: nodeup's request, signed the way nodeup
 * signs it, goes through the configured `aws` policy (the AWS simulator's STS verifies the signature
 * for real) and is answered as kops-controller answers. Served by worker processes
 * (`run --bootstrap-workers`), the main process keeps the one Node watch the workers' guards ask and
 * still signs.
 */
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { CertificatesV1Api, CoreV1Api } from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import { parse } from 'yaml';
import { signAwsStsProof } from '../agent/aws-proof.ts';
import type { ServingWorkers } from '../bootstrap/workers.ts';
import type { SigV4Credentials } from '../cloud/aws/sigv4.ts';
import { parseConfig } from '../config/loader.ts';
import { servingKind } from '../ledger/ledger.ts';
import { ConfigMapLedgerStore } from '../ledger/store.ts';
import { assertTlsPolicy, eventually, sClient } from '../net/testing.ts';
import { bundlePem, type CertificateAuthority, createCa } from '../pki/ca.ts';
import { buildCsrPem } from '../pki/csr-build.ts';
import { generateKey } from '../pki/keys.ts';
import { nativeApiVersion } from '../protocol/bootstrap-api.ts';
import type { LeaderComponent } from '../runtime/controller-runtime.ts';
import { type SimApiServer, startApiServer } from '../sim/apiserver/index.ts';
import { type AwsSimulator, startAwsSimulator } from '../sim/aws/server.ts';
import { kubeletNodeStatus } from '../sim/dev-cluster.ts';
import { cloudRequests } from '../testing/cloud-calls.ts';
import { FakeClock } from '../testing/fake-clock.ts';
import { nodeupBody } from '../testing/nodeup.ts';
import { opensslVerify } from '../testing/openssl.ts';
import { type ConfiguredBootstrap, startConfiguredBootstrap } from './bootstrap-server.ts';

const cluster = 'minimal.example.com';
const instanceId = 'i-0123456789abcdef0';

/** One HTTPS request to a bootstrap server trusting `ca`: its status and body. */
function send(
  url: string,
  ca: CertificateAuthority,
  options: { method: 'GET' | 'POST'; body?: string; headers?: Record<string, string> },
): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      { method: options.method, ca: bundlePem(ca), headers: options.headers ?? {} },
      (res) => {
        let text = '';
        res.on('data', (c: Buffer) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
      },
    );
    req.on('error', reject);
    req.end(options.body);
  });
}

/** A file holding `ca`'s bundle, for `openssl s_client -CAfile`. */
function caFileOf(ca: CertificateAuthority): string {
  const file = join(mkdtempSync(join(tmpdir(), 'bootstrap-server-ca-')), 'ca.pem');
  writeFileSync(file, bundlePem(ca));
  return file;
}

/** The certificate a new connection to `url` is served, as `openssl s_client` receives and verifies it. */
async function servedCertificate(url: string, caFile: string): Promise<X509Certificate> {
  const { output } = await sClient(Number(new URL(url).port), caFile, []);
  assert.match(output, /Verify return code: 0 \(ok\)/);
  const pem = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/.exec(output)?.[0];
  assert.ok(pem, output);
  return new X509Certificate(pem);
}

/**
 * Moves `clock` to two thirds of the served certificate's lifetime, checking that it is still served
 * a minute before; resolves with the certificate served then, once it is another.
 */
async function renewedCertificate(url: string, caFile: string, clock: FakeClock): Promise<X509Certificate> {
  const first = await servedCertificate(url, caFile);
  const lifetimeMs = first.validToDate.getTime() - first.validFromDate.getTime();
  await clock.advance((2 / 3) * lifetimeMs - 60_000);
  assert.equal((await servedCertificate(url, caFile)).serialNumber, first.serialNumber);
  await clock.advance(60_000);
  let renewed = await servedCertificate(url, caFile);
  for (let i = 0; i < 100 && renewed.serialNumber === first.serialNumber; i++) {
    await new Promise((resolve) => setTimeout(resolve, 50));
    renewed = await servedCertificate(url, caFile);
  }
  assert.notEqual(renewed.serialNumber, first.serialNumber);
  assert.ok(renewed.validToDate >= first.validToDate);
  assert.equal(renewed.subject, first.subject);
  assert.equal(renewed.subjectAltName, first.subjectAltName);
  return renewed;
}

describe('bootstrap server from a kops config', () => {
  let aws: AwsSimulator;
  let kube: SimApiServer;
  let ca: CertificateAuthority;
  let boot: ConfiguredBootstrap;
  let nodeCredentials: SigV4Credentials;
  const registry = new Registry();
  const clock = new FakeClock();

  before(async () => {
    aws = await startAwsSimulator({ throttling: false });
    aws.ec2.addInstances([
      {
        id: instanceId,
        zone: 'us-east-1a',
        cluster,
        instanceGroup: 'nodes-us-east-1a',
        privateIp: '10.1.2.3',
      },
    ]);
    nodeCredentials = aws.sts.addInstanceProfileSession(`nodes.${cluster}`, instanceId);
    kube = await startApiServer();
    ca = createCa();
    const config = parseConfig({
      clusterName: cluster,
      cloud: 'aws',
      server: {
        Listen: ':3988',
        provider: { aws: { nodesRoles: [`nodes.${cluster}`], Region: aws.region } },
        certNames: ['kubelet', 'kubelet-server', 'kube-proxy'],
      },
      bootstrap: {
        policies: [{ name: 'aws', stsEndpoint: aws.endpoint }],
        apiServers: [`https://api.internal.${cluster}`, 'https://10.0.0.10:6443'],
      },
    });
    boot = await startConfiguredBootstrap({
      config,
      kubeConfig: kube.kubeConfig(),
      vfsOptions: {},
      cloud: { aws: { endpoint: aws.endpoint, credentials: aws.credentials } },
      registry,
      server: { listen: '127.0.0.1:0', serverNames: { ipAddresses: ['127.0.0.1'] }, ca, clock },
    });
  });
  after(async () => {
    await boot.close();
    await kube.close();
    await aws.close();
  });

  test('the self-issued serving certificate is issued again at two thirds of its lifetime and served at once, under the same TLS policy', async () => {
    const caFile = caFileOf(ca);
    const renewed = await renewedCertificate(boot.server.url, caFile, clock);
    await assertTlsPolicy(Number(new URL(boot.server.url).port), caFile);
    // The ledger holds the certificate served now, not the one it replaced.
    await boot.ledger.flush();
    const ledger = new ConfigMapLedgerStore({ core: kube.kubeConfig().makeApiClient(CoreV1Api) });
    const serving = (await ledger.list()).filter((entry) => entry.kind === servingKind);
    assert.deepEqual(
      serving.map((entry) => entry.serial),
      [renewed.serialNumber.toLowerCase().replace(/^(00)+(?=.)/, '')],
    );
  });

  /** POSTs like nodeup: a fresh STS proof bound to the exact body, per attempt. */
  function nodeup(body: string, authorization = signAwsStsProof(body, nodeCredentials, aws.region, 1)) {
    return send(`${boot.server.url}/bootstrap`, ca, {
      method: 'POST',
      body,
      headers: { 'content-type': 'application/json', authorization },
    });
  }

  test('a signed nodeup request gets its kubelet certificate for the EC2 instance; its proof with another body is refused', async () => {
    const body = nodeupBody();
    const authorization = signAwsStsProof(body, nodeCredentials, aws.region, 1);
    const reply = await nodeup(body, authorization);
    assert.equal(reply.status, 200, reply.text);
    const kubelet = (JSON.parse(reply.text) as { Certs: Record<string, string> }).Certs['kubelet'] as string;
    assert.match(opensslVerify(bundlePem(ca), kubelet, 'sslclient'), /: OK$/);
    // The byte-identical request is nodeup's own retry (an answer lost on the way), for the same key.
    assert.equal((await nodeup(body, authorization)).status, 200, 'the same request again');
    const otherBody = body.replace('"keypairIDs":{}', '"keypairIDs":{},"includeNodeConfig":false');
    assert.deepEqual(
      await nodeup(otherBody, authorization),
      { status: 403, text: 'failed to verify token\n' },
      'the spent proof with another body',
    );
  });

  test("the cloud calls behind it are on the controller's metrics: its own STS call, the replay, EC2", async () => {
    const counted = await cloudRequests(registry);
    assert.equal(counted['aws GetCallerIdentity ok'], 1, JSON.stringify(counted));
    assert.ok((counted['aws GetCallerIdentity.replay ok'] ?? 0) >= 1, JSON.stringify(counted));
    assert.ok((counted['aws DescribeInstances ok'] ?? 0) >= 1, JSON.stringify(counted));
    assert.match(
      await registry.metrics(),
      /kops_controller_cloud_requests_total\{cloud="aws",call="GetCallerIdentity.replay",result="ok"\} \d+/,
    );
  });

  test('once the node is registered and Ready, nodeup gets 409', async () => {
    kube.store.create({
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name: instanceId },
      status: { conditions: [{ type: 'Ready', status: 'True' }] },
    });
    assert.deepEqual(await nodeup(nodeupBody()), { status: 409, text: 'node already registered\n' });
  });

  test('serves cluster-info once the leader has published it', async () => {
    const get = () =>
      new Promise<{ status: number; text: string }>((resolve, reject) => {
        request(`${boot.server.url}/cluster-info`, { ca: bundlePem(ca) }, (res) => {
          let text = '';
          res.on('data', (c: Buffer) => (text += c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
        })
          .on('error', reject)
          .end();
      });
    assert.equal((await get()).status, 503);
    assert.deepEqual(
      boot.components.map((c) => c.name),
      [
        'bootstrap-signer',
        'cluster-info-publisher',
        'bootstrap-token-cleaner',
        'bootstrap-replay-marker-collector',
        'certificate-expiry-gauge',
        'certificate-ledger-renewals',
      ],
    );
    const stop = new AbortController();
    const publishing = (boot.components[1] as LeaderComponent).start(stop.signal);
    try {
      let reply = await get();
      for (let i = 0; i < 100 && reply.status !== 200; i++) {
        await new Promise((resolve) => setTimeout(resolve, 50));
        reply = await get();
      }
      assert.equal(reply.status, 200, reply.text);
      const kubeconfig = (JSON.parse(reply.text) as { data: { kubeconfig: string } }).data.kubeconfig;
      // Both API servers of bootstrap.apiServers, in order; kubeadm's unnamed cluster is the first.
      const clusters = (parse(kubeconfig) as { clusters: { name: string; cluster: { server: string } }[] })
        .clusters;
      assert.deepEqual(
        clusters.map((c) => [c.name, c.cluster.server]),
        [
          ['', 'https://api.internal.minimal.example.com'],
          ['1', 'https://10.0.0.10:6443'],
        ],
      );
      assert.match(kubeconfig, new RegExp(Buffer.from(bundlePem(ca)).toString('base64').slice(0, 40)));
    } finally {
      stop.abort();
      await publishing;
    }
  });
});

describe('bootstrap server from a kops config, served by worker processes', () => {
  let kube: SimApiServer;
  let ca: CertificateAuthority;
  let boot: ConfiguredBootstrap;
  const registry = new Registry();
  const clock = new FakeClock();
  const workers = 2;
  // Per worker: the token Secrets, the queue's CSRs; the main process: the token Secrets its
  // leader-only cleaner and cluster-info publisher follow, and the Nodes the workers' guards ask about.
  const servingWatches = 2 * workers + 2;

  before(async () => {
    kube = await startApiServer();
    ca = createCa();
    boot = await startConfiguredBootstrap({
      config: parseConfig({
        clusterName: cluster,
        cloud: 'aws',
        server: { Listen: ':3988', provider: { aws: { nodesRoles: [`nodes.${cluster}`] } } },
        // The Node watch of the impersonation guard (the default, spelled out: it is what is counted).
        bootstrap: { policies: [{ name: 'queue' }], nodeGuard: 'watch' },
      }),
      kubeConfig: kube.kubeConfig(),
      vfsOptions: {},
      registry,
      server: { listen: '127.0.0.1:0', serverNames: { ipAddresses: ['127.0.0.1'] }, ca, workers, clock },
    });
  });
  after(async () => {
    await boot?.close();
    await kube.close();
  });

  function call(method: 'GET' | 'POST', path: string, body?: string) {
    return send(`${boot.server.url}${path}`, ca, {
      method,
      ...(body ? { body, headers: { 'content-type': 'application/json' } } : {}),
    });
  }

  test('the workers ask the main process about Nodes: one Node watch, the CSRs watched once per worker', async () => {
    assert.equal(await eventually(() => kube.faults.openWatches, servingWatches), servingWatches);
    assert.equal(kube.faults.dropWatches({ resource: 'nodes' }), 1);
    assert.equal(kube.faults.dropWatches({ resource: 'certificatesigningrequests' }), workers);
    assert.equal(kube.faults.dropWatches({ resource: 'secrets' }), workers + 1);
  });

  test("the guard's watch is the main process's own (nodes-guard): listed there only", async () => {
    const lists = async () =>
      Number(
        /^informer_lists_total\{resource="nodes-guard",result="success"\} (\d+)$/m.exec(
          await registry.metrics(),
        )?.[1],
      );
    // Once: a dropped watch resumes from where it was, without a list.
    assert.equal(await eventually(lists, 1), 1);
    assert.doesNotMatch(await registry.metrics(), /^informer_\w+\{resource="nodes"/m);
  });

  test("a worker's guard answers from the main process's watch, and refuses a Ready Node's name", async () => {
    const guardReads = async (source: string) =>
      Number(
        new RegExp(
          `^kops_controller_bootstrap_node_guard_reads_total\\{source="${source}"\\} (\\d+)$`,
          'm',
        ).exec(await registry.metrics())?.[1] ?? 0,
      );
    const nodesAdded = async () =>
      Number(
        /^informer_events_total\{resource="nodes-guard",type="added"\} (\d+)$/m.exec(
          await registry.metrics(),
        )?.[1] ?? 0,
      );
    kube.store.create({
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name: 'node-ready' },
      status: kubeletNodeStatus('node-ready', '10.0.0.7'),
    });
    // The first test dropped the main process's Node watch: until its new stream delivers the Node
    // (or has stayed open a second), the watch is not current and the guard reads every name from
    // the API server, so a 409 alone does not show the watch has the Node. Under load that reconnect
    // took long enough for 'node-new' below to be read from the API server too.
    assert.equal(await eventually(nodesAdded, 1), 1);
    const ask = (name: string) =>
      call(
        'POST',
        '/v1/certificates',
        JSON.stringify({
          apiVersion: nativeApiVersion,
          certificateSigningRequests: {
            kubelet: buildCsrPem(generateKey(), {
              subject: { commonName: `system:node:${name}`, organizations: ['system:nodes'] },
            }),
          },
        }),
      );
    // Once the main process's watch has the Node: asked about, it sends the worker to the API server.
    const refused = await eventually(async () => (await ask('node-ready')).status, 409);
    assert.equal(refused, 409);
    const [watchBefore, apiBefore] = [await guardReads('watch'), await guardReads('api')];
    // A name no Node has is settled by the watch: no read of the API server.
    let queued = await ask('node-new');
    for (let i = 0; i < 100 && queued.status === 503; i++) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      queued = await ask('node-new');
    }
    assert.equal(queued.status, 202, queued.text);
    await ask('node-ready');
    assert.equal(await eventually(() => guardReads('watch'), watchBefore + 1), watchBefore + 1);
    assert.equal(await eventually(() => guardReads('api'), apiBefore + 1), apiBefore + 1);
  });

  test('a policy the workers cannot build fails the start with its config error, and leaves nothing running', async () => {
    await assert.rejects(
      startConfiguredBootstrap({
        config: parseConfig({
          clusterName: cluster,
          cloud: 'aws',
          server: { Listen: ':3988', provider: { aws: { nodesRoles: [`nodes.${cluster}`] } } },
          bootstrap: { policies: [{ name: 'metal' }] },
        }),
        kubeConfig: kube.kubeConfig(),
        vfsOptions: {},
        registry: new Registry(),
        server: { listen: '127.0.0.1:0', serverNames: { ipAddresses: ['127.0.0.1'] }, ca, workers },
      }),
      { name: 'ConfigError', message: /approval policy metal needs the inventory in the state store/ },
    );
    // The running server's watches only (the previous test's, re-opened after it dropped them).
    assert.equal(await eventually(() => kube.faults.openWatches, servingWatches), servingWatches);
  });

  test('a worker queues the request; the main process, leading, signs it once approved', async () => {
    const csr = buildCsrPem(generateKey(), {
      subject: { commonName: 'system:node:node-w', organizations: ['system:nodes'] },
    });
    const body = JSON.stringify({
      apiVersion: nativeApiVersion,
      certificateSigningRequests: { kubelet: csr },
    });
    let queued = await call('POST', '/v1/certificates', body);
    // A worker serves before its queue has listed the CSRs: it answers 503 until then.
    for (let i = 0; i < 100 && queued.status === 503; i++) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      queued = await call('POST', '/v1/certificates', body);
    }
    assert.equal(queued.status, 202, queued.text);
    const { requestId, poll } = JSON.parse(queued.text) as { requestId: string; poll: string };
    const signer = boot.components.find((c) => c.name === 'bootstrap-signer') as LeaderComponent;
    const leading = new AbortController();
    const signing = signer.start(leading.signal);
    try {
      const certificates = kube.kubeConfig().makeApiClient(CertificatesV1Api);
      const pending = await certificates.readCertificateSigningRequest({ name: requestId });
      pending.status = {
        conditions: [{ type: 'Approved', status: 'True', reason: 'Test', message: 'approved by the test' }],
      };
      await certificates.replaceCertificateSigningRequestApproval({ name: requestId, body: pending });
      const issued = await call('GET', `${poll}?wait=30`);
      assert.equal(issued.status, 200, issued.text);
      const kubelet = (JSON.parse(issued.text) as { certificates: Record<string, string> }).certificates[
        'kubelet'
      ] as string;
      assert.match(opensslVerify(bundlePem(ca), kubelet, 'sslclient'), /: OK$/);
    } finally {
      leading.abort();
      await signing;
    }
  });
  test('the main process issues its serving certificate again; every worker serves it, and so does a replacement', async () => {
    const caFile = caFileOf(ca);
    const renewed = await renewedCertificate(boot.server.url, caFile, clock);
    // Sixteen connections: the kernel spreads them over both workers.
    const served = async () =>
      [
        ...new Set(
          await Promise.all(
            Array.from(
              { length: 16 },
              async () => (await servedCertificate(boot.server.url, caFile)).serialNumber,
            ),
          ),
        ),
      ].join();
    assert.equal(await eventually(served, renewed.serialNumber), renewed.serialNumber);
    const pool = boot.server as ServingWorkers;
    const [dying] = pool.pids();
    process.kill(dying as number, 'SIGKILL');
    const replaced = () => pool.pids().length === workers && !pool.pids().includes(dying as number);
    assert.ok(await eventually(replaced, true), `workers ${pool.pids()}`);
    assert.equal(await served(), renewed.serialNumber);
  });
});
