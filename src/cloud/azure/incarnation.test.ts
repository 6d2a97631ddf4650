/**
 * The incarnation of an Azure VM: its `vmId` (unique per VM, what its attested documents name) and
 * `properties.timeCreated`, read from ARM's real answers (the scale set's VM listing, a VM's GET) over
 * real HTTPS through the production client. A VM deleted and re-created under its name keeps its
 * providerID and computer name, but is another incarnation.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { KopsError } from '../../errors.ts';
import { type AzureSimulator, startAzureSimulator } from '../../sim/azure/simulator.ts';
import type { SimVm } from '../../sim/azure/world.ts';
import { simAzureClient } from '../../testing/azure-client.ts';
import { assertAnotherIncarnation } from '../../testing/incarnation.ts';
import type { IdentifyResult, NodeIdentity } from '../types.ts';
import { AzureNodeIdentifier } from './node-identifier.ts';

const cluster = 'prod.example.com';
const tags = { KubernetesCluster: cluster, 'kops.k8s.io_instancegroup': 'nodes' };
let sim: AzureSimulator;
let nodes: SimVm[];

before(async () => {
  sim = await startAzureSimulator({ pageSize: 50 });
  nodes = sim.world.seedKopsCluster(cluster, [{ name: 'nodes', count: 3 }]).get('nodes') as SimVm[];
});
after(() => sim.close());

/** A fresh identifier (no listing kept), so each test reads ARM. */
const identifier = () =>
  new AzureNodeIdentifier({ client: simAzureClient(sim), clusterName: cluster, coalesceWindowMs: 1 });

async function identify(vm: SimVm): Promise<IdentifyResult | undefined> {
  const providerID = sim.world.providerID(vm);
  return (await identifier().identify([providerID])).get(providerID);
}

function identityOf(result: IdentifyResult | undefined): NodeIdentity {
  assert.ok(result?.ok, result && !result.ok ? result.error.message : 'no result');
  return result.identity;
}

test('a scale-set VM’s identity carries its vmId and timeCreated, as the scale set’s VM listing gives them', async () => {
  const vm = nodes[1] as SimVm;
  vm.timeCreated = '2021-06-27T01:02:38.3138469+00:00';
  const identity = identityOf(await identify(vm));
  assert.deepEqual(identity.incarnation, {
    id: vm.vmId,
    createdAt: new Date('2021-06-27T01:02:38.313Z'),
  });
});

test('a standalone VM deleted and re-created under its name has the same providerID and name, and another incarnation', async () => {
  const first = sim.world.addVm('solo-node', tags);
  first.timeCreated = '2022-01-10T09:00:00.0000000+00:00';
  const before = identityOf(await identify(first));
  assert.deepEqual(before.incarnation, { id: first.vmId, createdAt: new Date('2022-01-10T09:00:00Z') });

  sim.world.deleteVm(first.name);
  const second = sim.world.addVm('solo-node', tags);
  assert.equal(sim.world.providerID(second), sim.world.providerID(first));
  const after = identityOf(await identify(second));
  assert.equal(after.providerID, before.providerID);
  assert.equal(after.incarnation?.id, second.vmId);
  assertAnotherIncarnation(before, after);
});

test('a timeCreated without an offset is UTC, as Azure’s SDKs read ARM’s times; an absent one leaves the vmId alone', async () => {
  const vm = nodes[2] as SimVm;
  vm.timeCreated = '2023-05-04T03:02:01.5';
  assert.deepEqual(identityOf(await identify(vm)).incarnation, {
    id: vm.vmId,
    createdAt: new Date('2023-05-04T03:02:01.500Z'),
  });
  (vm as { timeCreated: unknown }).timeCreated = undefined;
  assert.deepEqual(identityOf(await identify(vm)).incarnation, { id: vm.vmId });
});

test('a timeCreated that is there but no time is a malformed answer, in a listing and in a GET: a fault, never a verdict or dropped', async () => {
  const listed = nodes[0] as SimVm;
  const solo = sim.world.addVm('solo-bad-time', tags);
  for (const vm of [listed, solo]) {
    for (const value of ['last Tuesday', '2021-02-29T00:00:00Z', 1624755758, '']) {
      (vm as { timeCreated: unknown }).timeCreated = value;
      const result = await identify(vm);
      const what = `${vm.name}: timeCreated ${JSON.stringify(value)}`;
      assert.ok(result && !result.ok && result.error instanceof KopsError, what);
      assert.equal(result.error.kind, 'unavailable', `${what}: ${result.error.message}`);
      assert.equal(result.error.reasonCode, 'malformed-answer', what);
    }
    vm.timeCreated = '2024-01-01T00:00:00.0000000+00:00';
  }
});
