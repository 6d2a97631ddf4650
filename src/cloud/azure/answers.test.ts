/**
 * ARM answering wrongly (a buggy proxy, an API regression), over real HTTPS against the simulator's
 * `rewriteNext` fault: nextLinks that repeat or cycle, a read answering another VM or interface, the
 * same VM twice with different tags, tags of the wrong type, instance group tags kops never writes,
 * a 200 carrying an error or no JSON, an instance view without a state. Each is a fault
 * (`malformed-answer`, 503 on the bootstrap path), never another VM's identity, a denial or a loop.
 */

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Registry } from 'prom-client';
import { isDependencyFault } from '../../bootstrap/dependency.ts';
import type { KopsError } from '../../errors.ts';
import type { ArmRewrite } from '../../sim/azure/arm.ts';
import { type AzureSimulator, startAzureSimulator } from '../../sim/azure/simulator.ts';
import type { SimVm } from '../../sim/azure/world.ts';
import { bootstrapWith as bootstrapOf } from '../../testing/azure-bootstrap.ts';
import { simAzureClient } from '../../testing/azure-client.ts';
import { cloudRequests } from '../../testing/cloud-calls.ts';
import type { IdentifyResult } from '../types.ts';
import type { AzureClient } from './client.ts';
import { AzureCloudGroups } from './cloud-groups.ts';
import { AzureNodeIdentifier } from './node-identifier.ts';
import { parseAzureVmId } from './resource-id.ts';

const cluster = 'prod.example.com';
let sim: AzureSimulator;
let nodes: SimVm[];
let masters: SimVm[];

before(async () => {
  sim = await startAzureSimulator({ pageSize: 50 });
  // Thousands of pages in a few seconds: ARM's read bucket would answer 429 long before.
  sim.setReadBucket(undefined);
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

function identifier(registry?: Registry) {
  return new AzureNodeIdentifier({ client: client(registry), clusterName: cluster, coalesceWindowMs: 1 });
}

function malformed(result: IdentifyResult | undefined, what: string): KopsError {
  assert.ok(result && !result.ok, `${what}: expected a failure, got ${JSON.stringify(result)}`);
  const error = result.error as KopsError;
  assert.equal(error.kind, 'unavailable', `${what}: ${error.message}`);
  assert.equal(error.reasonCode, 'malformed-answer', `${what}: ${error.message}`);
  return error;
}

/** Identifies one VM with the next `times` answers of `operation` rewritten. */
async function identifyRewritten(vm: SimVm, operation: string, rewrite: ArmRewrite, times = 1) {
  sim.resetFaults();
  sim.rewriteNext(times, rewrite, operation);
  try {
    const pid = sim.world.providerID(vm);
    return (await identifier().identify([pid])).get(pid);
  } finally {
    await quiet();
    sim.resetFaults();
  }
}

/**
 * Lets the requests still in flight end: a listing that failed fails its call at once, while the
 * other listing of its pair may not have been served yet, and would spend the next test's rewrite.
 */
const quiet = () => new Promise((resolve) => setTimeout(resolve, 100));

type Json = Record<string, unknown> & { value?: Record<string, unknown>[] };
const body = (b: unknown) => b as Json;
const props = (vm: Record<string, unknown>) => vm['properties'] as Record<string, unknown>;
const sameLink = ({ url }: { url: URL }) => `${sim.armEndpoint}${url.pathname}?${url.searchParams}`;

test('azure: a VM listing whose nextLink repeats ends with a fault, not a loop', async () => {
  sim.clearCalls();
  const result = await identifyRewritten(
    nodes[0] as SimVm,
    'virtualMachineScaleSetVMs.list',
    (a) => ({ body: { ...body(a.body), nextLink: sameLink(a) } }),
    3_000,
  );
  malformed(result, 'repeated nextLink');
  assert.ok(
    sim.count('virtualMachineScaleSetVMs.list') <= 3,
    `${sim.count('virtualMachineScaleSetVMs.list')} pages`,
  );
});

test('azure: VM and interface listings whose nextLinks cycle end with a fault, not a loop', async () => {
  for (const operation of [
    'virtualMachineScaleSetVMs.list',
    'networkInterfaces.listVirtualMachineScaleSetNetworkInterfaces',
  ]) {
    sim.clearCalls();
    const result = await identifyRewritten(
      nodes[1] as SimVm,
      operation,
      (a) => {
        const next = new URL(sameLink(a));
        next.searchParams.set('$skiptoken', a.url.searchParams.get('$skiptoken') === '50' ? '0' : '50');
        return { body: { ...body(a.body), nextLink: next.toString() } };
      },
      3_000,
    );
    malformed(result, operation);
    assert.ok(sim.count(operation) <= 4, `${operation}: ${sim.count(operation)} pages`);
  }
});

test('azure: a scale-set listing whose nextLink repeats ends the cloud groups with a fault', async () => {
  sim.resetFaults();
  sim.clearCalls();
  sim.rewriteNext(
    3_000,
    (a) => ({ body: { ...body(a.body), nextLink: sameLink(a) } }),
    'virtualMachineScaleSets.list',
  );
  try {
    await assert.rejects(
      new AzureCloudGroups({ client: client() }).list(cluster),
      (err: KopsError) => err.reasonCode === 'malformed-answer',
    );
    assert.ok(
      sim.count('virtualMachineScaleSets.list') <= 3,
      `${sim.count('virtualMachineScaleSets.list')} pages`,
    );
  } finally {
    sim.resetFaults();
    sim.resetFaults();
  }
});

test("azure: a scale set's listing that carries another scale set's VM never gives the asked VM its identity", async () => {
  const master = masters[0] as SimVm;
  const asked = nodes.find((vm) => vm.instanceId === master.instanceId) as SimVm;
  const result = await identifyRewritten(asked, 'virtualMachineScaleSetVMs.list', (a) => {
    const page = body(a.body);
    for (const vm of page.value ?? []) {
      if (vm['instanceId'] === master.instanceId) {
        vm['id'] = sim.world.resourceId(master);
        vm['tags'] = { ...master.tags };
      }
    }
    return { body: page };
  });
  malformed(result, "another scale set's VM");
});

test('azure: the same VM listed twice with different tags is identified as neither; identical twice is fine', async () => {
  const vm = nodes[2] as SimVm;
  const twice =
    (change: (copy: Record<string, unknown>) => void): ArmRewrite =>
    (a) => {
      const page = body(a.body);
      const original = page.value?.find((v) => v['instanceId'] === vm.instanceId);
      if (original) {
        const copy = structuredClone(original);
        change(copy);
        page.value?.push(copy);
      }
      return { body: page };
    };
  malformed(
    await identifyRewritten(
      vm,
      'virtualMachineScaleSetVMs.list',
      twice((copy) => {
        copy['tags'] = { ...(copy['tags'] as object), 'kops.k8s.io_instancegroup': 'control-plane-eastus-1' };
      }),
    ),
    'conflicting duplicate',
  );
  const same = await identifyRewritten(
    vm,
    'virtualMachineScaleSetVMs.list',
    twice(() => {}),
  );
  assert.ok(same?.ok, JSON.stringify(same));
  assert.equal(same.identity.instanceGroup, 'nodes');

  sim.rewriteNext(
    1,
    twice(() => {}),
    'virtualMachineScaleSetVMs.list',
  );
  const groups = await new AzureCloudGroups({ client: client() }).list(cluster);
  const members = groups.find((g) => g.instanceGroup === 'nodes')?.members ?? [];
  assert.equal(
    members.filter((m) => m.instanceId === vm.name).length,
    1,
    'an identical repeat is one member',
  );
});

test('azure: a VM read answering another VM is a fault, never that VM (identifier and bootstrap)', async () => {
  const solo = sim.world.addVm('solo-asked', {
    KubernetesCluster: cluster,
    'kops.k8s.io_instancegroup': 'bastions',
  });
  const other = sim.world.addVm('solo-other', {
    KubernetesCluster: cluster,
    'kops.k8s.io_instancegroup': 'control-plane-eastus-1',
  });
  try {
    let otherJson: unknown;
    sim.rewriteNext(1, (a) => {
      otherJson = a.body;
      return {};
    });
    await client().getVm(parseAzureVmId(sim.world.resourceId(other)));
    const result = await identifyRewritten(solo, 'virtualMachines.get', () => ({ body: otherJson }));
    malformed(result, 'another VM');

    // The bootstrap path: the same mix-up is a 503, not a denial for a vmId mismatch.
    const decision = await bootstrapWith(solo, 'virtualMachines.get', () => ({ body: otherJson }));
    assert.ok(isDependencyFault(decision), `expected a dependency fault, got ${JSON.stringify(decision)}`);
  } finally {
    sim.world.deleteVm(solo.name);
    sim.world.deleteVm(other.name);
  }
});

test("azure: an interface read answering another VM's interface is a fault, never its addresses", async () => {
  const solo = sim.world.addVm('solo-nic', {
    KubernetesCluster: cluster,
    'kops.k8s.io_instancegroup': 'bastions',
  });
  const other = sim.world.addVm('solo-nic-other', { KubernetesCluster: cluster });
  try {
    let otherNic: unknown;
    sim.rewriteNext(1, (a) => {
      otherNic = a.body;
      return {};
    });
    await client().getNic(
      `/subscriptions/${sim.world.subscriptionId}/resourceGroups/${sim.world.resourceGroup}/providers/Microsoft.Network/networkInterfaces/${other.name}`,
    );
    malformed(
      await identifyRewritten(solo, 'networkInterfaces.get', () => ({ body: otherNic })),
      'another NIC',
    );
  } finally {
    sim.world.deleteVm(solo.name);
    sim.world.deleteVm(other.name);
  }
});

test('azure: tags of the wrong type are a fault, not a refusal and not a crash', async () => {
  const vm = nodes[3] as SimVm;
  for (const tags of [
    { KubernetesCluster: cluster, 'kops.k8s.io_instancegroup': 7 },
    { KubernetesCluster: [cluster], 'kops.k8s.io_instancegroup': 'nodes' },
    'KubernetesCluster=prod.example.com',
    ['KubernetesCluster'],
  ]) {
    const result = await identifyRewritten(vm, 'virtualMachineScaleSetVMs.list', (a) => {
      const page = body(a.body);
      for (const v of page.value ?? []) if (v['instanceId'] === vm.instanceId) v['tags'] = tags;
      return { body: page };
    });
    malformed(result, JSON.stringify(tags));
  }
});

test('azure: an instance group tag kops never writes is refused with a reason, and no cloud group', async () => {
  const bad = `bad-group.${cluster}`;
  sim.world.addScaleSet(bad, { KubernetesCluster: cluster, 'kops.k8s.io_instancegroup': '../../config' });
  const vm = sim.world.addScaleSetVm(bad, 'bad');
  try {
    const pid = sim.world.providerID(vm);
    const result = (await identifier().identify([pid])).get(pid);
    assert.ok(result && !result.ok, JSON.stringify(result));
    assert.equal((result.error as KopsError).kind, 'forbidden');
    assert.equal((result.error as KopsError).reasonCode, 'invalid-instance-group');
    const groups = await new AzureCloudGroups({ client: client() }).list(cluster);
    assert.ok(!groups.some((g) => g.cloudName === bad), 'no cloud group for it');
  } finally {
    sim.world.deleteVm(vm.name);
    sim.world.scaleSets.delete(bad.toLowerCase());
  }
});

test('azure: a 200 carrying an error body is a fault for every read, never an empty listing or a VM without address', async () => {
  const error = () => ({ body: { error: { code: 'InternalServerError', message: 'oops' } } });
  const vm = nodes[4] as SimVm;
  malformed(await identifyRewritten(vm, 'virtualMachineScaleSetVMs.list', error), 'VM listing');
  malformed(
    await identifyRewritten(vm, 'networkInterfaces.listVirtualMachineScaleSetNetworkInterfaces', error),
    'NIC listing',
  );
  const solo = sim.world.addVm('solo-error', {
    KubernetesCluster: cluster,
    'kops.k8s.io_instancegroup': 'bastions',
  });
  try {
    malformed(await identifyRewritten(solo, 'virtualMachines.get', error), 'VM get');
    malformed(await identifyRewritten(solo, 'networkInterfaces.get', error), 'NIC get');
    const decision = await bootstrapWith(solo, 'networkInterfaces.get', error);
    assert.ok(isDependencyFault(decision), `expected a dependency fault, got ${JSON.stringify(decision)}`);
  } finally {
    sim.world.deleteVm(solo.name);
  }
});

test('azure: a 200 that is not JSON is a fault, counted as an error, not ok', async () => {
  const vm = nodes[5] as SimVm;
  for (const operation of [
    'virtualMachineScaleSetVMs.list',
    'networkInterfaces.listVirtualMachineScaleSetNetworkInterfaces',
  ]) {
    const registry = new Registry();
    sim.rewriteNext(1, () => ({ raw: '<html>proxy</html>' }), operation);
    const pid = sim.world.providerID(vm);
    malformed((await identifier(registry).identify([pid])).get(pid), operation);
    await quiet();
    const counted = await cloudRequests(registry);
    assert.equal(counted[`azure ${operation} ok`] ?? 0, 0, JSON.stringify(counted));
    assert.equal(counted[`azure ${operation} error`], 1, JSON.stringify(counted));
  }
});

test('azure: an instance view without statuses, or a listing without instance views, is a fault, not not-running', async () => {
  const vm = nodes[6] as SimVm;
  const each =
    (change: (p: Record<string, unknown>) => void): ArmRewrite =>
    (a) => {
      const page = body(a.body);
      for (const v of page.value ?? []) if (v['instanceId'] === vm.instanceId) change(props(v));
      return { body: page };
    };
  malformed(
    await identifyRewritten(
      vm,
      'virtualMachineScaleSetVMs.list',
      each((p) => delete p['instanceView']),
    ),
    'no instance view',
  );
  malformed(
    await identifyRewritten(
      vm,
      'virtualMachineScaleSetVMs.list',
      each((p) => (p['instanceView'] = { statuses: [] })),
    ),
    'no statuses',
  );
  malformed(
    await identifyRewritten(
      vm,
      'virtualMachineScaleSetVMs.list',
      each((p) => (p['instanceView'] = { statuses: 'PowerState/running' })),
    ),
    'statuses not a list',
  );
});

/** The bootstrap `azure` policy's answer for `vm`, with the next answer of `operation` rewritten. */
function bootstrapWith(vm: SimVm, operation: string, rewrite: ArmRewrite): Promise<unknown> {
  return bootstrapOf(sim, { clusterName: cluster, client: client() }, vm, operation, rewrite);
}
