import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createHetznerProvider, type HetznerProvider } from '../../cloud/hetzner/provider.ts';
import { useSimulatedCloud } from '../../cloud/simulated-cloud.test-support.ts';
import { type HetznerSimulator, startHetznerSimulator } from '../../sim/hetzner/simulator.ts';
import { contextAt, testRequest } from '../../testing/bootstrap-request.ts';
import { dependencyOf, isDependencyFault } from '../dependency.ts';
import type { BootstrapPolicy, IdentityProof } from '../types.ts';
import {
  assertAbstainsOnOtherProofs,
  assertDenials,
  assertDependencyFaults,
  cloudIdProof,
} from './cloud-id.test-support.ts';
import { hetznerPolicy } from './hetzner.ts';

const cluster = 'prod.example.com';
let sim: HetznerSimulator;
let provider: HetznerProvider;
let policy: BootstrapPolicy;

useSimulatedCloud(startHetznerSimulator, (started) => {
  sim = started;
  provider = createHetznerProvider({
    clusterName: cluster,
    endpoint: started.endpoint,
    token: started.token,
    api: { retries: 1, retryDelayMs: 10 },
  });
  policy = hetznerPolicy({ identifier: provider.nodeIdentifier, lookupTimeoutMs: 2_000 });
  return provider;
});

const hetznerId = (token: string) => cloudIdProof('x-hetzner-id', token);
const evaluate = (proof: IdentityProof) => policy.evaluate(testRequest({ proof }), contextAt());

function ourServer(overrides: Parameters<HetznerSimulator['addServer']>[0] = {}) {
  return sim.addServer({
    name: 'nodes-fsn1-abc',
    labels: { 'kops.k8s.io/cluster': cluster, 'kops.k8s.io/instance-group': 'nodes-fsn1' },
    ...overrides,
  });
}

test('a running server of the cluster is approved with kops’ facts and a challenge on its private address', async () => {
  const server = ourServer({ publicIp: '203.0.113.9', privateIps: ['10.0.1.5', '10.1.0.5'] });
  const decision = await evaluate(hetznerId(String(server.id)));
  assert.equal(decision.verdict, 'approve', JSON.stringify(decision));
  assert.ok(decision.verdict === 'approve');
  assert.deepEqual(
    { ...decision.facts, evidence: undefined },
    {
      nodeName: 'nodes-fsn1-abc',
      instanceGroup: 'nodes-fsn1',
      instanceId: String(server.id),
      // The server's incarnation goes into its certificates, binding their renewal to this server.
      incarnationId: String(server.id),
      dnsNames: [],
      ipAddresses: ['203.0.113.9', '10.0.1.5', '10.1.0.5'],
      challengeEndpoint: '10.0.1.5:3987',
      evidence: undefined,
    },
  );
  assert.equal(decision.facts.evidence['providerID'], `hcloud://${server.id}`);
  // Read fresh for the request, as kops does: one GET.
  assert.equal(sim.count('servers.get'), 1);
});

test('every other proof is left to other policies', async () => {
  await assertAbstainsOnOtherProofs(evaluate, 'x-hetzner-id');
});

test('attacks and bad proofs are denied with the reason', async () => {
  const foreign = sim.addServer({
    labels: { 'kops.k8s.io/cluster': 'other.example.com', 'kops.k8s.io/instance-group': 'nodes' },
  });
  const unlabelled = sim.addServer({});
  const stopped = ourServer({ status: 'off' });
  const deleting = ourServer({ status: 'deleting' });
  const publicOnly = ourServer({ privateIps: [], publicIp: '203.0.113.10' });
  const oddName = ourServer({ name: 'Nodes_FSN1' });
  const cases: Array<[string, string, RegExp]> = [
    ['server of another cluster', String(foreign.id), /other\.example\.com/],
    [
      'server without the cluster label',
      String(unlabelled.id),
      /does not carry the label kops\.k8s\.io\/cluster=prod\.example\.com$/,
    ],
    ['stopped server', String(stopped.id), /is off, not running/],
    ['server being deleted', String(deleting.id), /is deleting, not running/],
    ['deleted server', '987654321', /not found/],
    ['no private network to challenge', String(publicOnly.id), /no private address/],
    ['a name that is no node name', String(oddName.id), /named "Nodes_FSN1", which is not a valid node name/],
    ['not a number', '12; DROP', /not a Hetzner server id/],
    ['negative', '-5', /not a Hetzner server id/],
    ['empty', '', /not a Hetzner server id/],
    ['too long', '9'.repeat(30), /not a Hetzner server id/],
  ];
  await assertDenials(evaluate, 'x-hetzner-id', cases);
});

test('the API failing, throttling or not answering is a dependency fault (503), never a denial', async () => {
  const server = ourServer();
  const token = String(server.id);
  await assertDependencyFaults(
    () => evaluate(hetznerId(token)),
    [
      { times: 5, status: 503 },
      { times: 5, status: 500 },
      { times: 5, status: 429 },
      { times: 5, status: 401 },
      { times: 5, status: 403 },
      { times: 5, drop: true },
      { times: 1, latencyMs: 3_000 },
    ],
    (fault) => {
      sim.clearFaults();
      sim.fault({ ...fault, operation: 'servers.get' });
    },
    'policy:hetzner',
  );
  sim.clearFaults();
  assert.equal((await evaluate(hetznerId(token))).verdict, 'approve');
});

test('a join storm shares cloud reads: concurrent requests are decided from one list, each read fresh', async () => {
  const servers = Array.from({ length: 40 }, (_, i) => ourServer({ name: `storm-${i}` }));
  const decisions = await Promise.all(servers.map((s) => evaluate(hetznerId(String(s.id)))));
  assert.ok(decisions.every((d) => d.verdict === 'approve'));
  assert.equal(sim.count('servers.get'), 0);
  assert.ok(sim.count('servers.list') <= 2, `${sim.count('servers.list')} list pages for 40 requests`);
});

test('a creation time in the server record that is no time is a dependency fault (503), never a denial nor dropped', async () => {
  const server = ourServer({ name: 'nodes-fsn1-bad-time', created: 'not a time' });
  const failure = await evaluate(hetznerId(String(server.id))).then(
    (decision) => assert.fail(`decided ${decision.verdict}`),
    (err: unknown) => err,
  );
  assert.ok(isDependencyFault(failure), String(failure));
  assert.equal(dependencyOf(failure), 'policy:hetzner');
});
