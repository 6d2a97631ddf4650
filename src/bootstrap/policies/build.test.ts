import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { test } from 'node:test';
import { Registry } from 'prom-client';
import { createAwsClients } from '../../cloud/aws/clients.ts';
import { cloudCallMetrics } from '../../cloud/metrics.ts';
import { parseConfig } from '../../config/loader.ts';
import { ConfigError } from '../../errors.ts';
import { createLogger } from '../../log.ts';
import { createCa } from '../../pki/ca.ts';
import { startAwsSimulator } from '../../sim/aws/server.ts';
import { createCertificateAuthority, issueClientCertificate } from '../../sim/tls.ts';
import { contextAt, testRequest } from '../../testing/bootstrap-request.ts';
import { cloudRequests } from '../../testing/cloud-calls.ts';
import { isDependencyFault } from '../dependency.ts';
import { MemoryReplayGuard } from '../replay-guard.ts';
import { awsAccountOf, buildPolicies, policySpecsOf } from './build.ts';

const base = { clusterName: 'c.example.com', cloud: 'aws' };
const deps = { replayGuard: new MemoryReplayGuard() };

test('kops default chains: the provider’s policy (server.pki → pki-tpm, kops metal), then renewal; none → []', () => {
  const names = (raw: object) => policySpecsOf(parseConfig({ ...base, ...raw })).map((p) => p.name);
  assert.deepEqual(names({ server: { provider: { aws: { nodesRoles: ['nodes'] } } } }), ['aws', 'renewal']);
  assert.deepEqual(names({ cloud: 'gce', server: { provider: { gce: { projectID: 'p' } } } }), [
    'gce',
    'renewal',
  ]);
  for (const [cloud, key, policy] of [
    ['openstack', 'openstack', 'openstack'],
    ['scaleway', 'scaleway', 'scaleway'],
    ['azure', 'azure', 'azure'],
    ['hetzner', 'hetzner', 'hetzner'],
    ['digitalocean', 'do', 'digitalocean'],
    ['linode', 'linode', 'linode'],
  ] as const) {
    assert.deepEqual(names({ cloud, server: { provider: { [key]: {} } } }), [policy, 'renewal'], cloud);
  }
  assert.deepEqual(names({ cloud: 'metal', server: { pki: {} } }), ['pki-tpm', 'renewal']);
  // The inventory mode stays available, chosen by name.
  assert.deepEqual(
    names({ cloud: 'metal', server: { pki: {} }, bootstrap: { policies: [{ name: 'metal' }] } }),
    ['metal'],
  );
  assert.deepEqual(names({}), []);
  assert.deepEqual(
    names({ bootstrap: { policies: [{ name: 'queue' }] }, server: { provider: { aws: {} } } }),
    ['queue'],
  );
});

test('buildPolicies builds the configured chain in order and warns loudly about insecure-always-approve', async () => {
  const lines: string[] = [];
  const logger = createLogger({
    level: 'info',
    destination: new Writable({
      write(chunk, _encoding, done) {
        lines.push(String(chunk));
        done();
      },
    }),
  });
  const config = parseConfig({
    ...base,
    bootstrap: {
      policies: [
        { name: 'always-reject' },
        { name: 'insecure-always-approve' },
        { name: 'queue' },
        { name: 'bootstrap-token', nodeNamePattern: 'w-[0-9]+' },
      ],
    },
  });
  const tokens = { validate: async () => ({ rejected: 'no such token' }) };
  const policies = await buildPolicies(config, { ...deps, tokens, logger });
  assert.deepEqual(
    policies.map((p) => p.name),
    ['always-reject', 'insecure-always-approve', 'queue', 'bootstrap-token'],
  );
  assert.ok(lines.some((l) => l.includes('"level":"warn"') && l.includes('INSECURE')));
});

test('a configured policy without its dependency is a configuration error', async () => {
  for (const policies of [
    [{ name: 'aws' }],
    [{ name: 'metal' }],
    [{ name: 'pki-tpm' }],
    [{ name: 'bootstrap-token' }],
    [{ name: 'gce' }],
  ]) {
    await assert.rejects(buildPolicies(parseConfig({ ...base, bootstrap: { policies } }), deps), ConfigError);
  }
  const webhook = {
    name: 'webhook',
    url: 'https://127.0.0.1:1/',
    caFile: '/nonexistent/ca.pem',
    certFile: 'c',
    keyFile: 'k',
  };
  await assert.rejects(
    buildPolicies(parseConfig({ ...base, bootstrap: { policies: [webhook] } }), deps),
    /webhook CA bundle \/nonexistent\/ca\.pem cannot be read/,
  );
});

test("pki-tpm takes its clock skew from kops' server.pki.MaxTimeSkew", async () => {
  const config = parseConfig({
    clusterName: 'c.example.com',
    cloud: 'metal',
    server: { pki: { MaxTimeSkew: 30 } },
  });
  const hosts = { get: async () => undefined };
  const [policy] = await buildPolicies(config, { ...deps, hosts, ca: createCa() });
  assert.equal(policy?.name, 'pki-tpm');
  const data = Buffer.from(
    JSON.stringify({
      instance: 'h',
      timestamp: Date.parse('2026-03-01T12:00:00Z') / 1000 - 31,
      audience: 'kops.k8s.io/node-bootstrap',
    }),
  );
  const token = Buffer.from(JSON.stringify({ signature: 'c2ln', data: data.toString('base64') })).toString(
    'base64',
  );
  const decision = await policy?.evaluate(testRequest({ proof: { kind: 'pki-tpm', token } }), contextAt());
  assert.equal(decision?.verdict, 'deny');
  assert.match(decision?.reasons.join(' ') ?? '', /at most 30 s/);
});

test('awsAccountOf learns the account and partition from STS', async () => {
  const sim = await startAwsSimulator({ throttling: false });
  const clients = await createAwsClients({
    region: sim.region,
    endpoint: sim.endpoint,
    credentials: sim.credentials,
    maxAttempts: 1,
  });
  try {
    assert.deepEqual(await awsAccountOf(clients.sts), { account: sim.account, partition: 'aws' });
  } finally {
    clients.destroy();
    await sim.close();
  }
});

test("the policies' own calls are counted on deps.cloudCalls: Google's token keys, the webhook", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'build-cloud-calls-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const ca = await createCertificateAuthority('webhook-ca');
  const client = await issueClientCertificate(ca, { name: 'kops-controller', groups: [] });
  writeFileSync(join(dir, 'ca.pem'), ca.certificate);
  writeFileSync(join(dir, 'cert.pem'), client.certificate);
  writeFileSync(join(dir, 'key.pem'), client.privateKey);
  const config = parseConfig({
    clusterName: 'c.example.com',
    cloud: 'gce',
    server: { provider: { gce: { projectID: 'kops-prod' } } },
    bootstrap: {
      policies: [
        { name: 'gce', jwksUrl: 'http://127.0.0.1:1/certs' },
        {
          name: 'webhook',
          url: 'https://127.0.0.1:1/review',
          caFile: join(dir, 'ca.pem'),
          certFile: join(dir, 'cert.pem'),
          keyFile: join(dir, 'key.pem'),
          timeout: 1_000,
        },
      ],
    },
  });
  const registry = new Registry();
  const unused = async () => assert.fail('no cloud lookup expected');
  const [gce, webhook] = await buildPolicies(config, {
    ...deps,
    serverUrl: 'https://kops-controller.internal.c.example.com:3988',
    gce: { identifier: { identify: unused }, compute: { getShieldedInstanceIdentity: unused } },
    cloudCalls: cloudCallMetrics(registry),
  });
  const segment = (v: object) => Buffer.from(JSON.stringify(v)).toString('base64url');
  const token = `${segment({ alg: 'RS256', kid: 'k1' })}.${segment({})}.c2ln`;
  const proven = testRequest({ proof: { kind: 'gce-identity-token', token }, claimedNodeName: 'n1' });
  // Both are unreachable: dependency faults (the node is told to retry), counted as errors.
  await assert.rejects(gce?.evaluate(proven, contextAt()) ?? Promise.resolve(), isDependencyFault);
  await assert.rejects(webhook?.evaluate(proven, contextAt()) ?? Promise.resolve(), isDependencyFault);
  assert.deepEqual(await cloudRequests(registry), {
    'gce jwks error': 1,
    'webhook BootstrapReview error': 1,
  });
});
