import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { type AddressInfo, createServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import type { STSClient } from '@aws-sdk/client-sts';
import { Registry } from 'prom-client';
import { createAwsClients } from '../../cloud/aws/clients.ts';
import { GceNodeIdentifier } from '../../cloud/gce/node-identifier.ts';
import { cloudCallMetrics } from '../../cloud/metrics.ts';
import { parseConfig } from '../../config/loader.ts';
import { ConfigError, exitCodeOf } from '../../errors.ts';
import { createCa } from '../../pki/ca.ts';
import { type AwsSimulator, startAwsSimulator } from '../../sim/aws/server.ts';
import { simulatorCompute } from '../../sim/gce/clients.ts';
import { startGceSimulator } from '../../sim/gce/simulator.ts';
import { createCertificateAuthority, issueClientCertificate } from '../../sim/tls.ts';
import { contextAt, testRequest } from '../../testing/bootstrap-request.ts';
import { cloudRequests } from '../../testing/cloud-calls.ts';
import { capturedLogger } from '../../testing/log-capture.ts';
import { evaluateChain } from '../chain.ts';
import { isDependencyFault } from '../dependency.ts';
import { MemoryReplayGuard } from '../replay-guard.ts';
import type { CloudIdScheme, IdentityProof } from '../types.ts';
import { awsAccountAtStartup, awsAccountOf, buildPolicies, policySpecsOf } from './build.ts';

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
  const { logger, lines } = capturedLogger();
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

test("gce: a token Google issued minutes ahead of this controller's clock is accepted within maxProofAge, as a late one; server.provider.gce.MaxTimeSkew 0 means the default, as server.pki's", async () => {
  const sim = await startGceSimulator({ project: 'kops-prod' });
  try {
    const zone = 'us-central1-a';
    const audience = 'https://kops-controller.internal.c.example.com:3988';
    const [node] = sim.world.seedInstanceGroup({
      zone,
      instanceGroup: 'nodes',
      count: 1,
      clusterName: base.clusterName,
    });
    const compute = simulatorCompute(sim);
    const identifier = new GceNodeIdentifier({ compute, clusterName: base.clusterName, coalesceWindowMs: 1 });
    for (const skew of [{}, { MaxTimeSkew: 0 }]) {
      const config = parseConfig({
        clusterName: base.clusterName,
        cloud: 'gce',
        server: { provider: { gce: { projectID: 'kops-prod', ...skew } } },
        bootstrap: { policies: [{ name: 'gce', jwksUrl: sim.jwksUri }] },
      });
      const [gce] = await buildPolicies(config, {
        replayGuard: new MemoryReplayGuard(),
        serverUrl: audience,
        gce: { identifier, compute },
      });
      const decide = (aheadSeconds: number) => {
        const issuedAt = Math.floor(Date.now() / 1000) + aheadSeconds;
        const token = sim.identityToken(zone, node?.name ?? '', { audience, format: 'full', issuedAt });
        return gce?.evaluate(testRequest({ proof: { kind: 'gce-identity-token', token } }), {
          now: () => new Date(),
        });
      };
      const ahead = await decide(240);
      assert.equal(ahead?.verdict, 'approve', `${JSON.stringify(skew)}: ${JSON.stringify(ahead)}`);
      const tooFar = await decide(360);
      assert.equal(tooFar?.verdict, 'deny');
      assert.match(tooFar?.reasons.join(' ') ?? '', /in the future.*check this controller's clock/);
    }
  } finally {
    await sim.close();
  }
});

/** The AWS simulator and an STS client of it (the SDK's retries off). */
async function withSts(run: (sim: AwsSimulator, sts: STSClient) => Promise<void>) {
  const sim = await startAwsSimulator({ throttling: false });
  const clients = await createAwsClients({
    region: sim.region,
    endpoint: sim.endpoint,
    credentials: sim.credentials,
    maxAttempts: 1,
  });
  try {
    await run(sim, clients.sts);
  } finally {
    clients.destroy();
    await sim.close();
  }
}

test('awsAccountOf learns the account and partition from STS', async () => {
  await withSts(async (sim, sts) => {
    assert.deepEqual(await awsAccountOf(sts), { account: sim.account, partition: 'aws' });
  });
});

describe('awsAccountAtStartup: STS failing as a replica starts', () => {
  /** A clock whose waits end at once, moving its time on by their length. */
  function jumpingClock() {
    let now = 0;
    return {
      monotonic: () => now,
      sleep: async (ms: number) => {
        now += ms;
        await new Promise((resolve) => setImmediate(resolve));
      },
    };
  }

  test('a failure that ends within its patience is ridden out, logged once, and the account learnt', async () => {
    await withSts(async (sim, sts) => {
      sim.faults.add({ service: 'sts', count: 3, error: { code: 'ServiceUnavailable', status: 503 } });
      const { logger, lines } = capturedLogger();
      const clock = jumpingClock();
      const learnt = await awsAccountAtStartup(sts, { logger, clock, sleep: clock.sleep });
      assert.deepEqual(learnt, { account: sim.account, partition: 'aws' });
      assert.equal(lines.filter((line) => line.includes('retrying before giving up the start-up')).length, 1);
      assert.ok(
        lines.some((line) => line.includes('"attempts":4')),
        lines.join(''),
      );
    });
  });

  test('an STS that never answers ends the start-up at its patience, not after the SDK has spent its retries', async () => {
    const sockets = new Set<Socket>();
    const silent = createServer((socket) => {
      sockets.add(socket);
      socket.on('data', () => undefined);
    });
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const clients = await createAwsClients({
      region: 'us-test-1',
      endpoint: `http://127.0.0.1:${(silent.address() as AddressInfo).port}`,
      credentials: { accessKeyId: 'AKIDEXAMPLE', secretAccessKey: 'secret' },
      maxAttempts: 3,
      requestTimeoutMs: 30_000,
    });
    try {
      const started = performance.now();
      await assert.rejects(awsAccountAtStartup(clients.sts, { patienceMs: 1_500 }), (err) => {
        assert.equal(exitCodeOf(err), 69);
        assert.match(String(err), /cannot learn this controller's AWS account from STS/);
        return true;
      });
      const took = performance.now() - started;
      assert.ok(took < 5_000, `gave up after ${Math.round(took)} ms for a patience of 1,500 ms`);
    } finally {
      clients.destroy();
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => silent.close(() => resolve()));
    }
  });

  test('an attempt the patience cuts off is not the last word: the line names what STS last answered', async () => {
    await withSts(async (sim, sts) => {
      sim.faults.add({ service: 'sts', count: 1, error: { code: 'Throttling', status: 400 } });
      sim.faults.add({ service: 'sts', latencyMs: 10_000 });
      await assert.rejects(awsAccountAtStartup(sts, { patienceMs: 2_500 }), (err) => {
        assert.match(String(err), /cannot learn this controller's AWS account from STS: .*Throttling/);
        assert.doesNotMatch(String(err), /abort/i);
        return true;
      });
    });
  });

  test('one that outlasts its patience ends the start-up as before (exit 69), and refused credentials end it at once', async () => {
    await withSts(async (sim, sts) => {
      sim.faults.add({ service: 'sts', error: { code: 'ServiceUnavailable', status: 503 } });
      const clock = jumpingClock();
      await assert.rejects(
        awsAccountAtStartup(sts, { clock, sleep: clock.sleep, patienceMs: 90_000 }),
        (err) => {
          assert.equal(exitCodeOf(err), 69);
          assert.match(String(err), /cannot learn this controller's AWS account from STS/);
          return true;
        },
      );
      assert.ok(
        clock.monotonic() <= 90_000 && clock.monotonic() > 45_000,
        `gave up after ${clock.monotonic()} ms`,
      );
      sim.faults.reset();
      sim.faults.add({ service: 'sts', error: { code: 'InvalidClientTokenId', status: 403 } });
      const refused = jumpingClock();
      await assert.rejects(
        awsAccountAtStartup(sts, { clock: refused, sleep: refused.sleep }),
        /InvalidClientTokenId/,
      );
      assert.equal(refused.monotonic(), 0, 'not retried');
    });
  });
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
          timeout: '1s',
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

// Every provider kops' config can carry, listed in the reverse of kops' order: the chain's order must
// not follow the config's key order.
const everyProvider = {
  linode: {},
  azure: { clusterName: 'c.example.com', subscriptionID: 's', resourceGroup: 'g' },
  scaleway: {},
  do: {},
  openstack: {},
  hetzner: {},
  gce: { projectID: 'p' },
  aws: { nodesRoles: ['nodes'] },
};

/** kops' main.go appends a verifier for each configured provider in this order, then server.pki's. */
const kopsOrder = [
  'aws',
  'gce',
  'hetzner',
  'openstack',
  'digitalocean',
  'scaleway',
  'azure',
  'linode',
  'pki-tpm',
];

test('kops default chain: every configured provider’s policy in kops’ order (server.pki last), then renewal', () => {
  const names = (raw: object) => policySpecsOf(parseConfig({ ...base, ...raw })).map((p) => p.name);
  // kops' Metal feature flag: server.pki next to a cloud provider.
  assert.deepEqual(names({ server: { provider: { aws: { nodesRoles: ['nodes'] } }, pki: {} } }), [
    'aws',
    'pki-tpm',
    'renewal',
  ]);
  assert.deepEqual(names({ cloud: 'gce', server: { provider: { gce: { projectID: 'p' }, hetzner: {} } } }), [
    'gce',
    'hetzner',
    'renewal',
  ]);
  assert.deepEqual(names({ server: { provider: everyProvider, pki: {} } }), [...kopsOrder, 'renewal']);
});

/** An id-only cloud's identifier that knows every server, in group `<cloud>-nodes`: who answered shows. */
function fakeIdentifier(cloud: string) {
  return {
    identify: async (providerIDs: readonly string[]) =>
      new Map(
        providerIDs.map((providerID) => [
          providerID,
          {
            ok: true as const,
            identity: {
              providerID,
              instanceId: '42',
              instanceGroup: `${cloud}-nodes`,
              state: 'running' as const,
              addresses: [
                { type: 'Hostname' as const, address: `${cloud}-node` },
                { type: 'InternalIP' as const, address: '10.0.0.5' },
              ],
            },
          },
        ]),
      ),
  };
}

/** A dependency no policy may touch to decide a malformed proof: touching it fails the test. */
const untouchable = <T extends object>(what: string): T =>
  new Proxy({} as T, {
    get: (_target, key) =>
      key === 'then' ? undefined : () => assert.fail(`${what}.${String(key)} was called`),
  });

test('in a chain of every provider each proof reaches its own policy, which decides it; the rest abstain', async () => {
  const config = parseConfig({ ...base, server: { provider: everyProvider, pki: {} } });
  const policies = await buildPolicies(config, {
    ...deps,
    aws: { account: '111122223333', partition: 'aws', region: 'us-east-1', instances: untouchable('ec2') },
    gce: { identifier: untouchable('gce identifier'), compute: untouchable('compute') },
    cloudIdentifiers: {
      hetzner: fakeIdentifier('hetzner'),
      digitalocean: fakeIdentifier('digitalocean'),
      linode: fakeIdentifier('linode'),
    },
    openstack: { nova: untouchable('nova') },
    scaleway: { clients: untouchable('scaleway') },
    azure: { client: untouchable('azure') },
    hosts: { get: async () => undefined },
    ca: createCa(),
    serverUrl: 'https://kops-controller.internal.c.example.com:3988',
  });
  assert.deepEqual(
    policies.map((p) => p.name),
    [...kopsOrder, 'renewal'],
  );
  const decide = (proof: IdentityProof) => evaluateChain(policies, testRequest({ proof }), contextAt());
  const cloudId = (scheme: CloudIdScheme, token: string): IdentityProof => ({
    kind: 'cloud-id',
    scheme,
    token,
  });
  // Malformed proofs: denied by their own policy, on its own grounds (not a policy failure).
  const denied: [IdentityProof, string][] = [
    [{ kind: 'aws-sts', version: 1, token: 'garbage' }, 'aws'],
    [{ kind: 'aws-sts', version: 2, token: 'garbage' }, 'aws'],
    [{ kind: 'gce-tpm', token: 'garbage' }, 'gce'],
    [{ kind: 'gce-identity-token', token: 'garbage' }, 'gce'],
    [cloudId('x-openstack-id', '../not an id'), 'openstack'],
    [cloudId('x-scaleway-instance-server-id', '../not an id'), 'scaleway'],
    [cloudId('x-azure-id', '../not an id'), 'azure'],
    [cloudId('x-hetzner-id', '../not an id'), 'hetzner'],
    [cloudId('x-digitalocean-droplet-id', '../not an id'), 'digitalocean'],
    [cloudId('x-linode-instance-id', '../not an id'), 'linode'],
    [{ kind: 'pki-tpm', token: 'garbage' }, 'pki-tpm'],
    [{ kind: 'node-renewal', token: 'garbage' }, 'renewal'],
  ];
  for (const [proof, policy] of denied) {
    const { decision, decidedBy, trail } = await decide(proof);
    const what = `${JSON.stringify(proof)}: ${JSON.stringify(decision)}`;
    assert.equal(decidedBy, policy, what);
    assert.equal(decision.verdict, 'deny', what);
    assert.doesNotMatch(decision.reasons.join(' '), /policy \S+ failed|was called/, what);
    // Every policy before it abstained: none denied a proof that is not its own.
    assert.ok(
      trail.slice(0, -1).every((entry) => entry.decision.verdict === 'abstain'),
      what,
    );
  }
  // A valid id of each callback cloud is approved by its policy, with its own cloud's record.
  for (const [scheme, policy] of [
    ['x-hetzner-id', 'hetzner'],
    ['x-digitalocean-droplet-id', 'digitalocean'],
    ['x-linode-instance-id', 'linode'],
  ] as const) {
    const { decision, decidedBy } = await decide(cloudId(scheme, '42'));
    assert.equal(decidedBy, policy);
    assert.equal(decision.verdict, 'approve', JSON.stringify(decision));
    assert.equal(decision.verdict === 'approve' && decision.facts.instanceGroup, `${policy}-nodes`);
  }
  // A proof no configured provider owns: every policy abstains, so the chain denies it.
  for (const proof of [
    { kind: 'none' },
    { kind: 'bootstrap-token', token: 'abcdef.0123456789abcdef' },
  ] as const) {
    const { decision, decidedBy, trail } = await decide(proof);
    assert.equal(decidedBy, undefined);
    assert.equal(decision.verdict, 'deny');
    assert.equal(trail.length, policies.length);
  }
});

test('each callback cloud’s policy asks its own cloud: a chain of two checks each id with its own identifier', async () => {
  const config = parseConfig({
    ...base,
    cloud: 'hetzner',
    server: { provider: { hetzner: {}, linode: {} } },
  });
  // Without Linode's own identifier the chain does not start: a Linode id is never checked against Hetzner.
  await assert.rejects(
    buildPolicies(config, {
      ...deps,
      ca: createCa(),
      cloudIdentifiers: { hetzner: fakeIdentifier('hetzner') },
    }),
    (err: unknown) =>
      err instanceof ConfigError && /approval policy linode needs the linode provider/.test(err.message),
  );
  const [hetzner, linode] = await buildPolicies(config, {
    ...deps,
    ca: createCa(),
    cloudIdentifiers: { hetzner: fakeIdentifier('hetzner'), linode: fakeIdentifier('linode') },
  });
  const decide = (policy: typeof hetzner, scheme: CloudIdScheme) =>
    policy?.evaluate(testRequest({ proof: { kind: 'cloud-id', scheme, token: '42' } }), contextAt());
  const viaHetzner = await decide(hetzner, 'x-hetzner-id');
  const viaLinode = await decide(linode, 'x-linode-instance-id');
  assert.equal(viaHetzner?.verdict === 'approve' && viaHetzner.facts.instanceGroup, 'hetzner-nodes');
  assert.equal(viaLinode?.verdict === 'approve' && viaLinode.facts.instanceGroup, 'linode-nodes');
});
