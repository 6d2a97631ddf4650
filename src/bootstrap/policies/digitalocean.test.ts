import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createDigitalOceanProvider, type DigitalOceanProvider } from '../../cloud/digitalocean/provider.ts';
import { useSimulatedCloud } from '../../cloud/simulated-cloud.test-support.ts';
import { type DigitalOceanSimulator, startDigitalOceanSimulator } from '../../sim/digitalocean/simulator.ts';
import { contextAt, testRequest } from '../../testing/bootstrap-request.ts';
import type { BootstrapPolicy, IdentityProof } from '../types.ts';
import {
  assertAbstainsOnOtherProofs,
  assertDenials,
  assertDependencyFaults,
  cloudIdProof,
} from './cloud-id.test-support.ts';
import { digitalOceanPolicy } from './digitalocean.ts';

const cluster = 'prod.example.com';
let sim: DigitalOceanSimulator;
let provider: DigitalOceanProvider;
let policy: BootstrapPolicy;

useSimulatedCloud(startDigitalOceanSimulator, (started) => {
  sim = started;
  provider = createDigitalOceanProvider({
    clusterName: cluster,
    endpoint: started.endpoint,
    token: started.token,
    api: { retries: 1, retryDelayMs: 10, maxRetryWaitMs: 100 },
  });
  policy = digitalOceanPolicy({ identifier: provider.nodeIdentifier, lookupTimeoutMs: 1_000 });
  return provider;
});

const dropletId = (token: string) => cloudIdProof('x-digitalocean-droplet-id', token);
const evaluate = (proof: IdentityProof) => policy.evaluate(testRequest({ proof }), contextAt());

test('an active droplet of the cluster is approved: named by its private address, challenged there', async () => {
  const [droplet] = sim.addGroup(cluster, 'nodes-nyc3', 1);
  assert.ok(droplet);
  droplet.publicIp = '198.51.100.8';
  const decision = await evaluate(dropletId(String(droplet.id)));
  assert.ok(decision.verdict === 'approve', JSON.stringify(decision));
  assert.equal(decision.facts.nodeName, droplet.privateIp);
  assert.equal(decision.facts.instanceGroup, 'nodes-nyc3');
  // Only private addresses are certified, as kops; the public one is not.
  assert.deepEqual(decision.facts.ipAddresses, [droplet.privateIp]);
  assert.equal(decision.facts.challengeEndpoint, `${droplet.privateIp}:3987`);
  // The droplet's incarnation (its never-reused id) goes into its certificates.
  assert.equal(decision.facts.incarnationId, String(droplet.id));
  assert.equal(sim.count('droplets.get'), 1);
});

test('other proofs are left to other policies', async () => {
  await assertAbstainsOnOtherProofs(evaluate, 'x-digitalocean-droplet-id');
});

test('attacks and bad proofs are denied with the reason', async () => {
  const foreign = sim.addGroup('other.example.com', 'nodes', 1)[0];
  const untagged = sim.addDroplet({});
  const [off, archived] = sim.addGroup(cluster, 'nodes', 2);
  const noPrivate = sim.addDroplet({
    privateIp: undefined,
    publicIp: '198.51.100.9',
    tags: ['KubernetesCluster:prod-example-com', 'kops-instancegroup:nodes'],
  });
  if (!foreign || !off || !archived) throw new Error('seed');
  off.status = 'off';
  archived.status = 'archive';
  const cases: Array<[string, string, RegExp]> = [
    ['droplet of another cluster', String(foreign.id), /other-example-com/],
    ['untagged droplet', String(untagged.id), /does not carry the tag KubernetesCluster:prod-example-com/],
    ['powered-off droplet', String(off.id), /is off, not running/],
    ['archived (destroyed) droplet', String(archived.id), /is archive, not running/],
    ['deleted droplet', '123456', /not_found/],
    ['only a public address', String(noPrivate.id), /no private address/],
    ['garbage', '1 2', /not a droplet id/],
    ['hex', '0x10', /not a droplet id/],
  ];
  await assertDenials(evaluate, 'x-digitalocean-droplet-id', cases);
});

test('the API failing, throttling or not answering is a dependency fault (503), never a denial', async () => {
  const [droplet] = sim.addGroup(cluster, 'nodes', 1);
  const token = String(droplet?.id);
  await assertDependencyFaults(
    () => evaluate(dropletId(token)),
    [
      { times: 3, status: 503 },
      { times: 3, status: 429 },
      { times: 3, status: 403 },
      { times: 3, drop: true },
      { times: 1, latencyMs: 1_500 },
    ],
    (fault) => {
      sim.clearFaults();
      sim.fault({ ...fault, operation: 'droplets.get' });
    },
    'policy:digitalocean',
  );
});
