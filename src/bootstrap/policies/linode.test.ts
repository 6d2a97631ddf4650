import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createLinodeProvider, type LinodeProvider } from '../../cloud/linode/provider.ts';
import { useSimulatedCloud } from '../../cloud/simulated-cloud.test-support.ts';
import { type LinodeSimulator, startLinodeSimulator } from '../../sim/linode/simulator.ts';
import { contextAt, testRequest } from '../../testing/bootstrap-request.ts';
import type { BootstrapPolicy, IdentityProof } from '../types.ts';
import {
  assertAbstainsOnOtherProofs,
  assertDenials,
  assertDependencyFaults,
  cloudIdProof,
} from './cloud-id.test-support.ts';
import { linodeCloudId, linodePolicy } from './linode.ts';

const cluster = 'prod.example.com';
let sim: LinodeSimulator;
let provider: LinodeProvider;
let policy: BootstrapPolicy;

useSimulatedCloud(startLinodeSimulator, (started) => {
  sim = started;
  provider = createLinodeProvider({
    clusterName: cluster,
    origin: started.origin,
    token: started.token,
    api: { retries: 1, retryDelayMs: 10, maxRetryWaitMs: 100 },
  });
  policy = linodePolicy({ identifier: provider.nodeIdentifier, lookupTimeoutMs: 1_000 });
  return provider;
});

const linodeId = (token: string) => cloudIdProof('x-linode-instance-id', token);
const evaluate = (proof: IdentityProof) => policy.evaluate(testRequest({ proof }), contextAt());

test('a running instance of the cluster is approved: named by its label, challenged on its private IPv4', async () => {
  const [instance] = sim.addGroup(cluster, 'nodes-us-ord', 1);
  assert.ok(instance);
  const [publicIp, privateIp] = instance.ipv4;
  const decision = await evaluate(linodeId(String(instance.id)));
  assert.ok(decision.verdict === 'approve', JSON.stringify(decision));
  assert.equal(decision.facts.nodeName, instance.label);
  assert.equal(decision.facts.instanceGroup, 'nodes-us-ord');
  assert.deepEqual(decision.facts.ipAddresses, [publicIp, privateIp]);
  assert.equal(decision.facts.challengeEndpoint, `${privateIp}:3987`);
  // The instance's incarnation (its never-reused id) goes into its certificates.
  assert.equal(decision.facts.incarnationId, String(instance.id));
  assert.equal(sim.count('linode.instances.get'), 1);
});

test('other proofs are left to other policies', async () => {
  await assertAbstainsOnOtherProofs(evaluate, 'x-linode-instance-id');
});

test('attacks and bad proofs are denied with the reason', async () => {
  const foreign = sim.addGroup('other.example.com', 'nodes', 1)[0];
  const untagged = sim.addInstance({});
  const [offline, deleting] = sim.addGroup(cluster, 'nodes', 2);
  const publicOnly = sim.addInstance({
    ipv4: ['172.105.9.9'],
    tags: [`kops.k8s.io/cluster:${cluster}`, 'kops.k8s.io/instance-group:nodes'],
  });
  if (!foreign || !offline || !deleting) throw new Error('seed');
  offline.status = 'offline';
  deleting.status = 'deleting';
  const cases: Array<[string, string, RegExp]> = [
    ['instance of another cluster', String(foreign.id), /other\.example\.com/],
    [
      'untagged instance',
      String(untagged.id),
      /does not carry the tag kops\.k8s\.io\/cluster:prod\.example\.com/,
    ],
    ['powered-off instance', String(offline.id), /is offline, not running/],
    ['instance being deleted', String(deleting.id), /is deleting, not running/],
    ['deleted instance', '123456', /Not found/],
    ['only a public address', String(publicOnly.id), /no private address/],
    ['garbage', 'linode', /not a Linode instance id/],
    ['beyond a safe integer', '9'.repeat(16), /not a Linode instance id/],
  ];
  await assertDenials(evaluate, 'x-linode-instance-id', cases);
});

test('the API failing, throttling or not answering is a dependency fault (503), never a denial', async () => {
  const [instance] = sim.addGroup(cluster, 'nodes', 1);
  const token = String(instance?.id);
  await assertDependencyFaults(
    () => evaluate(linodeId(token)),
    [
      { times: 3, status: 503 },
      { times: 3, status: 429 },
      { times: 3, status: 401 },
      { times: 3, drop: true },
      { times: 1, latencyMs: 1_500 },
    ],
    (fault) => {
      sim.clearFaults();
      sim.fault({ ...fault, operation: 'linode.instances.get' });
    },
    'policy:linode',
  );
});

test("the certificate names only the instance's IPv4 addresses, as kops' verifier, though its identity also carries its IPv6", () => {
  const facts = linodeCloudId.facts({
    providerID: 'linode://7',
    instanceId: '7',
    instanceGroup: 'nodes',
    state: 'running',
    addresses: [
      { type: 'InternalIP', address: '192.168.130.7' },
      { type: 'ExternalIP', address: '203.0.113.7' },
      { type: 'ExternalIP', address: '2600:3c00::f03c:91ff:fe00:7' },
      { type: 'Hostname', address: 'nodes-7' },
    ],
  });
  assert.deepEqual(facts.ipAddresses, ['203.0.113.7', '192.168.130.7']);
  assert.equal(facts.challengeAddress, '192.168.130.7');
  assert.equal(facts.nodeName, 'nodes-7');
});
