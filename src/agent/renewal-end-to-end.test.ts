/**
 * Renewal end to end, through real sockets: the bootstrap server composed from a kops config as `run`
 * composes it (chain `aws` then `renewal`, the replay guard in the simulated API server, the AWS
 * provider against the AWS simulator), a node that joined with its instance profile and registered a
 * Ready Node, then the real `kops-controller join --renew` on its `--dir` — and kops' `POST /bootstrap`
 * with `x-kops-renewal`. Every refusal leaves the directory byte for byte as it was.
 */
import assert from 'node:assert/strict';
import { createPrivateKey, generateKeyPairSync, X509Certificate } from 'node:crypto';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join as joinPath } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { CoreV1Api, KubeConfig, type V1NodeStatus } from '@kubernetes/client-node';
import type { Command } from 'commander';
import { Registry } from 'prom-client';
import { buildClusterInfo, clusterInfoHandler } from '../bootstrap/discovery.ts';
import { type ConfiguredBootstrap, startConfiguredBootstrap } from '../cli/bootstrap-server.ts';
import { buildProgram, errorLine } from '../cli/main.ts';
import { formatAwsProviderID } from '../cloud/aws/providerid.ts';
import { parseConfig } from '../config/loader.ts';
import { exitCodeOf } from '../errors.ts';
import { bundlePem, type CertificateAuthority, createCa } from '../pki/ca.ts';
import { generateKey, privateKeyPem } from '../pki/keys.ts';
import { pinOfCertificatePem } from '../pki/pin.ts';
import { issueCertificate, publicKeyRequest } from '../pki/profiles.ts';
import { renderClusterInfoKubeconfig } from '../protocol/cluster-info.ts';
import { type SimApiServer, startApiServer } from '../sim/apiserver/index.ts';
import { type AwsSimulator, startAwsSimulator } from '../sim/aws/server.ts';
import { kubeletNodeStatus } from '../sim/dev-cluster.ts';
import { nodeupBody, postNodeup } from '../testing/nodeup.ts';
import { opensslText } from '../testing/openssl.ts';
import { signAwsStsProof } from './aws-proof.ts';
import { join } from './join.ts';
import { nodeFileNames, nodeFilePath } from './node-files.ts';
import { readCurrentCredentials, renewalProof } from './renewal.ts';

const cluster = 'renew.example.com';
const zone = 'us-east-1a';
const ca = createCa();
const caPem = bundlePem(ca);
let aws: AwsSimulator;
let sim: SimApiServer;
let boot: ConfiguredBootstrap;
let root: string;
/** The pins of both CAs of the published bundle: the cluster CA and the simulated API server's. */
let pins: string[];
let nodes = 0;

interface Outcome {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * Runs the real command line in this process (the servers keep serving); `onError` sees standard
 * error as it is written, so a test can act on a retry line while the command still runs.
 */
async function cli(args: string[], onError: (stderr: string) => void = () => undefined): Promise<Outcome> {
  const program = await buildProgram();
  let stdout = '';
  let stderr = '';
  const capture = (command: Command): void => {
    command.configureOutput({
      writeOut: (text) => (stdout += text),
      writeErr: (text) => {
        stderr += text;
        onError(stderr);
      },
    });
    for (const sub of command.commands) capture(sub);
  };
  capture(program);
  try {
    await program.parseAsync(['-v', '0', ...args], { from: 'user' });
    return { code: 0, stdout, stderr };
  } catch (err) {
    return { code: exitCodeOf(err), stdout, stderr: `${stderr}kops-controller: ${errorLine(err)}\n` };
  }
}

/** `join --renew` of the node whose credentials are in `dir`. */
function renew(dir: string, ...extra: string[]): string[] {
  return [
    'join',
    '--renew',
    '--server',
    boot.server.url,
    ...pins,
    '--cluster-name',
    cluster,
    '--dir',
    dir,
    ...extra,
  ];
}

/** The files of `dir` a reader sees: every entry but the hidden `..data` link and its versions. */
async function visibleFiles(dir: string): Promise<string[]> {
  return (await readdir(dir)).filter((name) => !name.startsWith('..')).sort();
}

/** Every file of `dir` and its bytes, and the hidden entries: what a refusal must leave untouched. */
async function snapshot(dir: string) {
  const names = await visibleFiles(dir);
  const files = new Map(
    await Promise.all(names.map(async (n) => [n, await readFile(joinPath(dir, n), 'utf8')] as const)),
  );
  return { files, hidden: (await readdir(dir)).filter((name) => name.startsWith('..')).sort() };
}

/** A running instance of the `nodes` group and its instance profile session. */
function launch(options: { privateIp?: string } = {}) {
  const n = ++nodes;
  const instanceId = `i-${n.toString(16).padStart(17, '0')}`;
  const privateIp = options.privateIp ?? `10.7.0.${n}`;
  aws.ec2.addInstances([{ id: instanceId, zone, cluster, instanceGroup: 'nodes', privateIp }]);
  const session = aws.sts.addInstanceProfileSession(`nodes.${cluster}`, instanceId);
  return { instanceId, privateIp, session };
}

type Instance = ReturnType<typeof launch>;

/** The first join with the cloud proof (the real `join`), as `join --cloud aws` makes it. */
function cloudJoin(instance: Instance, dir: string, servingCertificate = true) {
  return join({
    server: boot.server.url,
    caBundlePem: caPem + sim.caCertificate,
    apiServer: sim.url,
    nodeName: instance.instanceId,
    dir,
    proof: async (body) => signAwsStsProof(body, instance.session, aws.region, 2),
    servingCertificate,
    timeoutMs: 20_000,
    retry: { initialMs: 100, maxMs: 1000 },
  });
}

/** Joins `instance` and registers its Node, Ready, with the credentials it got (as the kubelet does). */
async function joinedReadyNode(instance: Instance, options: { servingCertificate?: boolean } = {}) {
  const dir = joinPath(root, instance.instanceId);
  await cloudJoin(instance, dir, options.servingCertificate ?? true);
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromFile(nodeFilePath(dir, 'kubeconfig'));
  await kubeConfig.makeApiClient(CoreV1Api).createNode({
    body: {
      metadata: { name: instance.instanceId },
      spec: { providerID: formatAwsProviderID(zone, instance.instanceId) },
      status: kubeletNodeStatus(instance.instanceId, instance.privateIp) as V1NodeStatus,
    },
  });
  return dir;
}

function certificateIn(dir: string, file: 'clientCertificate' | 'serverCertificate') {
  return readFile(nodeFilePath(dir, file), 'utf8').then((pem) => new X509Certificate(pem));
}

/** A --dir holding a kubelet client certificate for `nodeName` from `issuer`, and its key. */
async function credentialsDir(
  nodeName: string,
  options: { issuer?: CertificateAuthority; issuedAt?: Date; lifetimeMs?: number } = {},
) {
  const dir = joinPath(root, `crafted-${++nodes}`);
  await mkdir(dir, { mode: 0o700 });
  const key = generateKey();
  const issued = issueCertificate(
    options.issuer ?? ca,
    'kubelet',
    publicKeyRequest(key),
    { name: nodeName, dnsNames: [], ipAddresses: [] },
    {
      ...(options.issuedAt ? { now: options.issuedAt } : {}),
      ...(options.lifetimeMs ? { lifetimeMs: options.lifetimeMs } : {}),
    },
  );
  await writeFile(nodeFilePath(dir, 'clientCertificate'), issued.pem);
  await writeFile(nodeFilePath(dir, 'clientKey'), privateKeyPem(key), { mode: 0o600 });
  return { dir, nodeName, certificate: new X509Certificate(issued.pem), key };
}

before(async () => {
  root = await mkdtemp(joinPath(tmpdir(), 'kops-renewal-e2e-'));
  aws = await startAwsSimulator({ throttling: false });
  // The API server accepts the cluster CA's client certificates: the node registers with its own.
  sim = await startApiServer({ clientCAs: [caPem] });
  pins = ['--ca-pin', pinOfCertificatePem(caPem), '--ca-pin', pinOfCertificatePem(sim.caCertificate)];
  const published = renderClusterInfoKubeconfig({
    servers: [sim.url],
    caBundlePem: caPem + sim.caCertificate,
  });
  const config = parseConfig({
    clusterName: cluster,
    cloud: 'aws',
    server: {
      Listen: ':3988',
      provider: { aws: { nodesRoles: [`nodes.${cluster}`], Region: aws.region } },
    },
    // kops' default chain for AWS, as `run` builds it: the cloud proof, then renewal.
    bootstrap: { policies: [{ name: 'aws', stsEndpoint: aws.endpoint }, { name: 'renewal' }] },
  });
  boot = await startConfiguredBootstrap({
    config,
    kubeConfig: sim.kubeConfig(),
    vfsOptions: {},
    cloud: { aws: { endpoint: aws.endpoint, credentials: aws.credentials } },
    registry: new Registry(),
    server: {
      listen: '127.0.0.1:0',
      serverNames: { ipAddresses: ['127.0.0.1'] },
      ca,
      apiServer: sim.url,
      clusterInfoHandler: clusterInfoHandler(() => buildClusterInfo(published, [], new Date())),
    },
  });
});

after(async () => {
  await boot.close();
  await Promise.all([sim.close(), aws.close()]);
  await rm(root, { recursive: true, force: true });
});

describe('join --renew against the bootstrap server (native path)', () => {
  test('a Ready node renews: new client and serving certificates, same name, serving addresses from the cloud now, every file consistent', async () => {
    const instance = launch();
    const dir = await joinedReadyNode(instance);
    const before = {
      client: await certificateIn(dir, 'clientCertificate'),
      server: await certificateIn(dir, 'serverCertificate'),
    };
    // The impersonation guard: a first join of this name is refused now that its Node is Ready.
    await assert.rejects(cloudJoin(instance, joinPath(root, 'second-first-join')), (err) => {
      assert.equal(exitCodeOf(err), 75, String(err));
      return true;
    });
    // Since the first join the instance got a public address: the renewed certificate names what
    // EC2 reports now.
    aws.ec2.addInstances([
      {
        id: instance.instanceId,
        zone,
        cluster,
        instanceGroup: 'nodes',
        privateIp: instance.privateIp,
        publicIp: '203.0.113.9',
      },
    ]);

    const outcome = await cli(renew(dir, '-o', 'json'));
    assert.equal(outcome.code, 0, outcome.stderr);
    const result = JSON.parse(outcome.stdout);
    assert.equal(result.nodeName, instance.instanceId);
    assert.equal(result.instanceGroup, 'nodes');

    const client = await certificateIn(dir, 'clientCertificate');
    const server = await certificateIn(dir, 'serverCertificate');
    assert.notEqual(client.serialNumber, before.client.serialNumber);
    assert.notEqual(server.serialNumber, before.server.serialNumber);
    assert.match(client.subject, new RegExp(`^O=system:nodes\\nCN=system:node:${instance.instanceId}$`));
    assert.match(server.subject, new RegExp(`CN=system:node:${instance.instanceId}`));
    for (const certificate of [client, server])
      assert.ok(certificate.verify(new X509Certificate(caPem).publicKey));
    assert.match(opensslText(server.toString()), /IP Address:203\.0\.113\.9/);
    assert.match(
      opensslText(server.toString()),
      new RegExp(`IP Address:${instance.privateIp.replaceAll('.', '\\.')}`),
    );

    // Consistent: each certificate is its key's; the kubeconfig embeds exactly the files' pair.
    const current = await readCurrentCredentials(dir);
    assert.equal(current.nodeName, instance.instanceId);
    const serverKey = await readFile(nodeFilePath(dir, 'serverKey'), 'utf8');
    assert.ok(server.checkPrivateKey(createPrivateKey(serverKey)));
    const kubeConfig = new KubeConfig();
    kubeConfig.loadFromFile(nodeFilePath(dir, 'kubeconfig'));
    const user = kubeConfig.getCurrentUser();
    assert.equal(Buffer.from(user?.certData ?? '', 'base64').toString(), client.toString());
    assert.equal(
      Buffer.from(user?.keyData ?? '', 'base64').toString(),
      await readFile(nodeFilePath(dir, 'clientKey'), 'utf8'),
    );
    assert.deepEqual(await visibleFiles(dir), Object.values(nodeFileNames).sort(), 'no stray files');
    // The renewed kubeconfig authenticates as the node.
    const node = await kubeConfig.makeApiClient(CoreV1Api).readNode({ name: instance.instanceId });
    assert.equal(node.spec?.providerID, formatAwsProviderID(zone, instance.instanceId));
  });

  test('a node without a serving certificate renews its client certificate only', async () => {
    const dir = await joinedReadyNode(launch(), { servingCertificate: false });
    const before = await certificateIn(dir, 'clientCertificate');
    const outcome = await cli(renew(dir));
    assert.equal(outcome.code, 0, outcome.stderr);
    assert.notEqual((await certificateIn(dir, 'clientCertificate')).serialNumber, before.serialNumber);
    assert.ok(!(await visibleFiles(dir)).includes(nodeFileNames.serverCertificate));
  });
});

describe('join --renew refusals: exit code per docs/operations.md, nothing written', () => {
  const refusals: {
    name: string;
    code: number;
    line: RegExp;
    setup(): Promise<{ dir: string; args?: string[] }>;
  }[] = [
    {
      name: 'a certificate from another CA',
      code: 77,
      line: /^kops-controller: the bootstrap request was denied: renewal refused: the certificate is not from the cluster CA\n$/,
      setup: async () => ({
        dir: (await credentialsDir(launch().instanceId, { issuer: createCa({ name: 'other-ca' }) })).dir,
      }),
    },
    {
      name: 'an expired certificate',
      code: 77,
      line: /^kops-controller: .*kubelet-client\.crt expired on .*: an expired node cannot renew; join it again with a cloud proof or token\n$/,
      setup: async () => ({
        dir: (
          await credentialsDir(launch().instanceId, {
            issuedAt: new Date(Date.now() - 10 * 86_400_000),
            lifetimeMs: 86_400_000,
          })
        ).dir,
      }),
    },
    {
      name: "another cluster's name (audience)",
      code: 77,
      line: /^kops-controller: the bootstrap request was denied: renewal refused: the audience is "kops-controller\.other\.example\.com"\n$/,
      setup: async () => ({
        dir: await joinedReadyNode(launch()),
        args: ['--cluster-name', 'other.example.com'],
      }),
    },
    {
      name: 'the instance stopped',
      code: 77,
      line: /^kops-controller: the bootstrap request was denied: renewal refused: the cloud does not vouch for node (i-[0-9a-f]+): instance \1 is stopped, not pending or running\n$/,
      setup: async () => {
        const instance = launch();
        const dir = await joinedReadyNode(instance);
        aws.ec2.setInstanceState(instance.instanceId, 'stopped');
        return { dir };
      },
    },
  ];
  for (const refusal of refusals) {
    test(`${refusal.name}: exit ${refusal.code}, one line, the files untouched`, async () => {
      const { dir, args = [] } = await refusal.setup();
      const before = await snapshot(dir);
      const base = renew(dir);
      // A later --cluster-name overrides the default one.
      const outcome = await cli([...base, ...args, '--timeout', '20s']);
      assert.equal(outcome.code, refusal.code, outcome.stderr);
      assert.match(outcome.stderr, refusal.line);
      assert.deepEqual(await snapshot(dir), before);
    });
  }

  test('an expired certificate sent anyway (a client without the local check): the server refuses it', async () => {
    const crafted = await credentialsDir(launch().instanceId, {
      issuedAt: new Date(Date.now() - 10 * 86_400_000),
      lifetimeMs: 86_400_000,
    });
    const before = await snapshot(crafted.dir);
    const { nodeName } = crafted;
    await assert.rejects(
      join({
        server: boot.server.url,
        caBundlePem: caPem + sim.caCertificate,
        apiServer: sim.url,
        nodeName,
        dir: crafted.dir,
        proof: renewalProof({ nodeName, certificate: crafted.certificate, key: crafted.key }, cluster),
        servingCertificate: false,
        timeoutMs: 20_000,
      }),
      (err) => {
        assert.equal(exitCodeOf(err), 77);
        assert.match(String(err), /denied: renewal refused: the certificate expired on /);
        return true;
      },
    );
    assert.deepEqual(await snapshot(crafted.dir), before);
  });

  test('EC2 failing while the node renews: 503, retried after Retry-After, renewed once EC2 answers', async () => {
    const instance = launch();
    const dir = await joinedReadyNode(instance);
    const before = await certificateIn(dir, 'clientCertificate');
    aws.faults.add({ service: 'ec2', error: { code: 'ServiceUnavailable', status: 503 } });
    let healed = false;
    const outcome = await cli(renew(dir, '--timeout', '60s'), (stderr) => {
      // EC2 recovers once the node has been told to retry because of it (a 429 from the per-source
      // rate limit, which the earlier tests of this file may have drained, is another retry).
      if (!healed && /retrying in \ds: POST .* answered 503 /.test(stderr)) {
        healed = true;
        aws.faults.reset();
      }
    });
    aws.faults.reset();
    assert.equal(outcome.code, 0, outcome.stderr);
    assert.match(
      outcome.stderr,
      /^bootstrap request: retrying in \ds: POST .*\/v1\/certificates answered 503 /m,
    );
    assert.notEqual((await certificateIn(dir, 'clientCertificate')).serialNumber, before.serialNumber);
  });
});

/** POSTs nodeup's request to the server's `/bootstrap` with `authorization`. */
function kopsBootstrap(body: string, authorization: string) {
  return postNodeup(boot.server.url, body, authorization, caPem);
}

describe('kops path: POST /bootstrap with x-kops-renewal', () => {
  test('a Ready node renews its kubelet certificate; the same request with its cloud proof is 409', async () => {
    const instance = launch();
    const dir = await joinedReadyNode(instance);
    const current = await readCurrentCredentials(dir);
    const newKey = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey;
    const body = nodeupBody(newKey);
    const first = await kopsBootstrap(body, signAwsStsProof(body, instance.session, aws.region, 1));
    assert.equal(first.status, 409, first.text);

    const answer = await kopsBootstrap(
      body,
      (await renewalProof(current, cluster)(Buffer.from(body))) as string,
    );
    assert.equal(answer.status, 200, answer.text);
    const issued = new X509Certificate(
      (JSON.parse(answer.text) as { Certs: { kubelet: string } }).Certs.kubelet,
    );
    assert.match(issued.subject, new RegExp(`CN=system:node:${instance.instanceId}`));
    assert.ok(issued.checkPrivateKey(newKey), 'for the new key');
    assert.notEqual(issued.serialNumber, current.certificate.serialNumber);
  });
});
