import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Registry } from 'prom-client';
import type { KopsError } from '../../errors.ts';
import { type AzureSimulator, startAzureSimulator } from '../../sim/azure/simulator.ts';
import type { SimPowerState, SimVm } from '../../sim/azure/world.ts';
import { simAzureClient } from '../../testing/azure-client.ts';
import { cloudRequests } from '../../testing/cloud-calls.ts';
import type { IdentifyResult } from '../types.ts';
import type { AzureClient } from './client.ts';
import { AzureCloudGroups } from './cloud-groups.ts';
import { AzureNodeIdentifier } from './node-identifier.ts';

const cluster = 'prod.example.com';
let sim: AzureSimulator;
let nodes: SimVm[];
let masters: SimVm[];

before(async () => {
  sim = await startAzureSimulator({ pageSize: 50 });
  const groups = sim.world.seedKopsCluster(cluster, [
    { name: 'nodes', count: 120 },
    { name: 'control-plane-eastus-1', role: 'control-plane', count: 1 },
  ]);
  nodes = groups.get('nodes') as SimVm[];
  masters = groups.get('control-plane-eastus-1') as SimVm[];
});
after(() => sim.close());

function client(registry?: Registry): AzureClient {
  return simAzureClient(sim, { registry });
}

function identifier(options: { registry?: Registry; now?: () => number } = {}) {
  return new AzureNodeIdentifier({
    client: client(options.registry),
    clusterName: cluster,
    coalesceWindowMs: 1,
    ...(options.now ? { now: options.now } : {}),
  });
}

function ok(result: IdentifyResult | undefined) {
  assert.ok(result?.ok, result && !result.ok ? result.error.message : 'no result');
  return result.identity;
}

function failure(result: IdentifyResult | undefined): Error {
  assert.ok(result && !result.ok, 'expected a failure');
  return result.error;
}

test('identifies scale-set VMs from their tags, with addresses and power state', async () => {
  const vm = nodes[3] as SimVm;
  const master = masters[0] as SimVm;
  const results = await identifier().identify([sim.world.providerID(vm), sim.world.providerID(master)]);
  const identity = ok(results.get(sim.world.providerID(vm)));
  assert.equal(identity.instanceGroup, 'nodes');
  assert.equal(identity.instanceId, vm.name);
  assert.equal(identity.state, 'running');
  assert.deepEqual(identity.addresses, [
    { type: 'InternalIP', address: vm.privateIp },
    { type: 'Hostname', address: vm.computerName.toLowerCase() },
  ]);
  assert.equal(ok(results.get(sim.world.providerID(master))).instanceGroup, 'control-plane-eastus-1');
});

test('121 nodes cost one paged listing per scale set; concurrent and repeated callers share it', async () => {
  const registry = new Registry();
  const id = identifier({ registry });
  sim.clearCalls();
  const all = [...nodes, ...masters].map((vm) => sim.world.providerID(vm));
  const halves = await Promise.all([id.identify(all.slice(0, 60)), id.identify(all.slice(60))]);
  assert.equal(halves[0].size + halves[1].size, 121);
  for (const half of halves) for (const result of half.values()) ok(result);
  // 120 VMs at 50 a page: 3 pages each of VMs and of interfaces; the control plane set: 1 + 1.
  assert.equal(sim.count('virtualMachineScaleSetVMs.list'), 4);
  assert.equal(sim.count('networkInterfaces.listVirtualMachineScaleSetNetworkInterfaces'), 4);
  assert.equal(sim.count('virtualMachineScaleSetVMs.get'), 0);
  await id.identify(all);
  assert.equal(
    sim.calls.filter((c) => !c.operation.startsWith('imds')).length,
    8,
    'a second pass within the listing lifetime makes no ARM call',
  );
  const counted = await cloudRequests(registry);
  assert.equal(counted['azure virtualMachineScaleSetVMs.list ok'], 4);
});

test('a caller deciding trust (maxAgeMs) gets a fresh listing; a deallocated VM is then refused', async () => {
  const id = identifier();
  const vm = nodes[5] as SimVm;
  const pid = sim.world.providerID(vm);
  await id.identify([pid]);
  vm.powerState = 'deallocated';
  try {
    assert.equal(ok((await id.identify([pid])).get(pid)).state, 'running');
    const error = failure((await id.identify([pid], { maxAgeMs: 0 })).get(pid)) as KopsError;
    assert.equal(error.kind, 'forbidden');
    assert.equal(error.reasonCode, 'not-running');
    assert.match(error.message, /is stopped, not running or starting/);
  } finally {
    vm.powerState = 'running';
  }
});

test('a clock stepped back after running ahead: maxAgeMs 0 still gets a fresh listing, so a deallocated VM is refused', async () => {
  let clock = 3_600_000; // an hour ahead when the listing was read
  const id = identifier({ now: () => clock });
  const vm = nodes[6] as SimVm;
  const pid = sim.world.providerID(vm);
  ok((await id.identify([pid])).get(pid));
  vm.powerState = 'deallocated';
  try {
    clock = 1_000; // corrected
    const error = failure((await id.identify([pid], { maxAgeMs: 0 })).get(pid)) as KopsError;
    assert.equal(error.reasonCode, 'not-running');
  } finally {
    vm.powerState = 'running';
  }
});

test('only a running or starting VM has an identity: stopped, deallocated and stopping VMs are refused as not-running', async () => {
  const states: SimPowerState[] = [
    'starting',
    'running',
    'stopping',
    'stopped',
    'deallocating',
    'deallocated',
  ];
  const vms = states.map((state) => {
    const vm = sim.world.addScaleSetVm(`nodes.${cluster}`);
    vm.powerState = state;
    return vm;
  });
  const solo = sim.world.addVm('stopped-solo', {
    KubernetesCluster: cluster,
    'kops.k8s.io_instancegroup': 'bastions',
  });
  solo.powerState = 'stopped';
  try {
    const results = await identifier().identify([...vms, solo].map((vm) => sim.world.providerID(vm)));
    for (const [i, state] of states.entries()) {
      const result = results.get(sim.world.providerID(vms[i] as SimVm));
      if (state === 'starting' || state === 'running') {
        assert.equal(ok(result).state, state === 'running' ? 'running' : 'pending', state);
        continue;
      }
      const error = failure(result) as KopsError;
      assert.equal(error.kind, 'forbidden', state);
      assert.equal(error.reasonCode, 'not-running', state);
      const mapped = state.startsWith('stop') ? state : state === 'deallocating' ? 'stopping' : 'stopped';
      assert.match(error.message, new RegExp(`is ${mapped}, not running or starting`), state);
    }
    const soloError = failure(results.get(sim.world.providerID(solo))) as KopsError;
    assert.equal(soloError.reasonCode, 'not-running');
  } finally {
    for (const vm of [...vms, solo]) sim.world.deleteVm(vm.name);
  }
});

test('a VM whose instance view has no power state yet is refused as not-running', async () => {
  const vm = sim.world.addScaleSetVm(`nodes.${cluster}`);
  const pid = sim.world.providerID(vm);
  // Azure reports only `ProvisioningState/creating` until the VM has a power state.
  vm.powerState = undefined;
  try {
    const error = failure((await identifier().identify([pid])).get(pid)) as KopsError;
    assert.equal(error.reasonCode, 'not-running');
  } finally {
    sim.world.deleteVm(vm.name);
  }
});

test("other clusters' scale sets, untagged sets, deleted VMs and foreign ids are refused with typed errors", async () => {
  const other = sim.world
    .seedKopsCluster('other.example.com', [{ name: 'nodes', count: 1 }])
    .get('nodes')?.[0] as SimVm;
  sim.world.addScaleSet(`untagged.${cluster}`, { KubernetesCluster: cluster });
  const untagged = sim.world.addScaleSetVm(`untagged.${cluster}`, 'untagged');
  const gone = sim.world.addScaleSetVm(`nodes.${cluster}`);
  const goneId = sim.world.providerID(gone);
  sim.world.deleteVm(gone.name);
  const foreign = sim.world.providerID(nodes[0] as SimVm).replace(sim.world.resourceGroup, 'other-rg');
  const otherId = sim.world.providerID(other);
  const untaggedId = sim.world.providerID(untagged);
  const ids = [otherId, untaggedId, goneId, foreign, 'azure:///nonsense', 'aws:///i-1'];
  const results = await identifier().identify(ids);
  assert.match(failure(results.get(otherId)).message, /not named <group>\.prod\.example\.com/);
  assert.match(failure(results.get(untaggedId)).message, /no kops\.k8s\.io_instancegroup tag/);
  assert.equal(failure(results.get(goneId)).name, 'NotFoundError');
  assert.equal(failure(results.get(foreign)).name, 'ForbiddenError');
  assert.equal(failure(results.get('azure:///nonsense')).name, 'InvalidInputError');
  assert.equal(failure(results.get('aws:///i-1')).name, 'InvalidInputError');
});

test('a listing ARM fails is not cached: the error is a fault, the next call reads again', async () => {
  const id = identifier();
  const pid = sim.world.providerID(nodes[0] as SimVm);
  sim.failNext(1, 503, 'virtualMachineScaleSetVMs.list');
  const error = failure((await id.identify([pid])).get(pid));
  assert.equal(error.name, 'UnavailableError');
  ok((await id.identify([pid])).get(pid));
  sim.failNext(1, 429, 'virtualMachineScaleSetVMs.list');
  assert.equal(failure((await identifier().identify([pid])).get(pid)).name, 'RateLimitedError');
});

test('a standalone VM is read with one GET and its interface', async () => {
  const solo = sim.world.addVm('bastion-1', {
    KubernetesCluster: cluster,
    'kops.k8s.io_instancegroup': 'bastions',
  });
  sim.clearCalls();
  const pid = sim.world.providerID(solo);
  const identity = ok((await identifier().identify([pid])).get(pid));
  assert.equal(identity.instanceGroup, 'bastions');
  assert.deepEqual(identity.addresses[0], { type: 'InternalIP', address: solo.privateIp });
  assert.equal(sim.count('virtualMachines.get'), 1);
  assert.equal(sim.count('networkInterfaces.get'), 1);
});

test("cloud groups are the cluster's tagged scale sets with capacity and members; a stale model needs an update", async () => {
  const stale = nodes[7] as SimVm;
  stale.latestModelApplied = false;
  const groups = await new AzureCloudGroups({ client: client() }).list(cluster);
  stale.latestModelApplied = true;
  const byGroup = new Map(groups.map((g) => [g.instanceGroup, g]));
  assert.ok(!groups.some((g) => g.cloudName.endsWith('other.example.com')));
  const group = byGroup.get('nodes');
  assert.ok(group);
  assert.equal(group.cloudName, `nodes.${cluster}`);
  assert.equal(group.targetSize, sim.world.scaleSets.get(`nodes.${cluster}`)?.capacity);
  assert.equal(group.members.length, group.targetSize);
  const member = group.members.find((m) => m.instanceId === stale.name);
  assert.equal(member?.providerID, sim.world.providerID(stale));
  assert.notEqual(member?.template, group.template);
  assert.equal(group.members.find((m) => m.instanceId === nodes[0]?.name)?.template, group.template);
  assert.equal(byGroup.has('untagged'), false, 'a set without the group tag is skipped');
});
