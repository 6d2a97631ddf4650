/**
 * End to end: a node joins through the bootstrap server as `run` builds it (kops' nodeup request, the
 * aws policy against the AWS simulator), its certificate lands in the ledger in the simulated API
 * server, and the leader's gauge exports its expiry; a new controller (restart, another leader) exports
 * the same from the API server alone.
 */
import assert from 'node:assert/strict';
import { generateKeyPairSync, X509Certificate } from 'node:crypto';
import { request } from 'node:https';
import { after, before, describe, test } from 'node:test';
import { Registry } from 'prom-client';
import { signAwsStsProof } from '../agent/aws-proof.ts';
import { kopsApiVersion } from '../bootstrap/kops-handler.ts';
import { type ConfiguredBootstrap, startConfiguredBootstrap } from '../cli/bootstrap-server.ts';
import { parseConfig } from '../config/loader.ts';
import { makeClients } from '../kube/client.ts';
import { bundlePem, type CertificateAuthority, createCa } from '../pki/ca.ts';
import { spkiOf } from '../pki/keys.ts';
import { encodePem } from '../pki/pem.ts';
import { type SimApiServer, startApiServer } from '../sim/apiserver/index.ts';
import { type AwsSimulator, startAwsSimulator } from '../sim/aws/server.ts';
import { CertificateExpiryGauge, expiryGaugeName, lifetimeGaugeName } from './expiry-gauge.ts';
import { epochSeconds } from './ledger.ts';
import { ConfigMapLedgerStore } from './store.ts';

const cluster = 'ledger.example.com';
const instanceId = 'i-0123456789abcdef1';

/** The gauge's value for a kind and instance group in a registry's exposition, if exported. */
async function gaugeValue(registry: Registry, kind: string, group: string): Promise<number | undefined> {
  const line = (await registry.metrics())
    .split('\n')
    .find((l) => l.startsWith(`${expiryGaugeName}{kind="${kind}",instance_group="${group}"}`));
  return line === undefined ? undefined : Number(line.split(' ').at(-1));
}

describe('certificate expiry ledger, from a join to the gauge', () => {
  let aws: AwsSimulator;
  let kube: SimApiServer;
  let ca: CertificateAuthority;
  let boot: ConfiguredBootstrap;
  const registry = new Registry();

  before(async () => {
    aws = await startAwsSimulator({ throttling: false });
    aws.ec2.addInstances([
      {
        id: instanceId,
        zone: 'us-east-1a',
        cluster,
        instanceGroup: 'nodes-us-east-1a',
        privateIp: '10.1.2.4',
      },
    ]);
    kube = await startApiServer();
    ca = createCa();
    boot = await startConfiguredBootstrap({
      config: parseConfig({
        clusterName: cluster,
        cloud: 'aws',
        server: {
          Listen: ':3988',
          provider: { aws: { nodesRoles: [`nodes.${cluster}`], Region: aws.region } },
          certNames: ['kubelet', 'kube-proxy'],
        },
        bootstrap: { policies: [{ name: 'aws', stsEndpoint: aws.endpoint }] },
      }),
      kubeConfig: kube.kubeConfig(),
      vfsOptions: {},
      cloud: { aws: { endpoint: aws.endpoint, credentials: aws.credentials } },
      registry,
      server: { listen: '127.0.0.1:0', serverNames: { ipAddresses: ['127.0.0.1'] }, ca },
    });
  });
  after(async () => {
    await boot.close();
    await kube.close();
    await aws.close();
  });

  /** nodeup's request for a kubelet and a kube-proxy certificate; resolves with the certificates. */
  function join(): Promise<Record<string, string>> {
    const key = () =>
      encodePem('RSA PUBLIC KEY', spkiOf(generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey));
    const body = JSON.stringify({
      apiVersion: kopsApiVersion,
      certs: { kubelet: key(), 'kube-proxy': key() },
      keypairIDs: {},
    });
    const credentials = aws.sts.addInstanceProfileSession(`nodes.${cluster}`, instanceId);
    const authorization = signAwsStsProof(body, credentials, aws.region, 1);
    return new Promise((resolve, reject) => {
      const req = request(
        `${boot.server.url}/bootstrap`,
        { method: 'POST', ca: bundlePem(ca), headers: { 'content-type': 'application/json', authorization } },
        (res) => {
          let text = '';
          res.on('data', (c: Buffer) => (text += c));
          res.on('end', () =>
            res.statusCode === 200
              ? resolve((JSON.parse(text) as { Certs: Record<string, string> }).Certs)
              : reject(new Error(`${res.statusCode}: ${text}`)),
          );
        },
      );
      req.on('error', reject);
      req.end(body);
    });
  }

  test('the leader exports the earliest expiry per kind and instance group; a restarted controller the same', async () => {
    const certs = await join();
    await boot.ledger.flush();
    const notAfter = (pem: string) => epochSeconds(new Date(new X509Certificate(pem).validTo));

    const gauge = boot.components.find((c) => c.name === 'certificate-expiry-gauge');
    assert.ok(gauge, 'the gauge is one of the leader-only components');
    assert.equal(
      await gaugeValue(registry, 'kubelet', 'nodes-us-east-1a'),
      undefined,
      'not exported before leading',
    );
    const leading = new AbortController();
    const running = gauge.start(leading.signal);
    try {
      // The component reads the ledger as it starts; wait for that read (bounded by the test timeout).
      let value = await gaugeValue(registry, 'kubelet', 'nodes-us-east-1a');
      while (value === undefined) {
        await new Promise((resolve) => setTimeout(resolve, 20));
        value = await gaugeValue(registry, 'kubelet', 'nodes-us-east-1a');
      }
      assert.equal(value, notAfter(certs['kubelet'] as string));
      assert.equal(
        await gaugeValue(registry, 'kube-proxy', 'nodes-us-east-1a'),
        notAfter(certs['kube-proxy'] as string),
      );
      assert.equal(await gaugeValue(registry, 'ca', ''), notAfter(ca.signer.certificate.pem));
      const lifetime = (pem: string) =>
        notAfter(pem) - epochSeconds(new Date(new X509Certificate(pem).validFrom));
      assert.equal(
        Number(
          (await registry.metrics())
            .split('\n')
            .find((l) =>
              l.startsWith(`${lifetimeGaugeName}{kind="kubelet",instance_group="nodes-us-east-1a"}`),
            )
            ?.split(' ')
            .at(-1),
        ),
        lifetime(certs['kubelet'] as string),
      );
      const serving = await gaugeValue(registry, 'kops-controller-serving', '');
      assert.ok(
        serving !== undefined && serving > epochSeconds(new Date()),
        `serving certificate: ${serving}`,
      );
    } finally {
      leading.abort();
      await running;
    }
    assert.equal(
      await gaugeValue(registry, 'kubelet', 'nodes-us-east-1a'),
      undefined,
      'a former leader exports nothing',
    );

    // A new process (a restart, or another replica taking the lease): only the API server is shared.
    const restarted = new Registry();
    const fresh = new CertificateExpiryGauge({
      store: new ConfigMapLedgerStore({ core: makeClients(kube.kubeConfig()).core }),
      registry: restarted,
    });
    await fresh.refresh();
    assert.equal(
      await gaugeValue(restarted, 'kubelet', 'nodes-us-east-1a'),
      notAfter(certs['kubelet'] as string),
    );
  });
});
