/**
 * ARM answers as the real service sends them, where they differ from what the simulator used to send
 * (over real HTTPS, through the production client):
 * - a scale set's VM being deleted is listed with `properties.provisioningState: "Deleting"` and no
 *   instance view, `$expand=instanceView` notwithstanding (kubernetes-sigs/cloud-provider-azure
 *   pkg/provider/azure_vmss.go: "vm.InstanceView or vm.InstanceView.Statuses are nil when the VM is
 *   under deleting"; azure_vmss_cache.go matches `ProvisioningState` "Deleting" case-insensitively);
 * - an api-version ARM does not serve in a region or cloud yet is a 400
 *   `{"error":{"code":"NoRegisteredProviderFound","message":"No registered resource provider found
 *   for location … and API version …"}}` (Azure/azure-cli#28496, pulumi/pulumi-azure-nextgen#170,
 *   Azure/migAz#246): a refusal of the controller's own request, never a verdict on a node;
 * - a listing's `nextLink` may come without `api-version`: the SDK whose pipeline the client uses
 *   adds its own then (@azure/arm-compute dist/esm/static-helpers/pagingHelpers.js,
 *   `addApiVersionToUrl`), and ARM refuses a request without one (400 MissingApiVersionParameter).
 */

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { isCloudVerdict, isDependencyFault } from '../../bootstrap/dependency.ts';
import type { KopsError } from '../../errors.ts';
import type { ArmRewrite } from '../../sim/azure/arm.ts';
import { type AzureSimulator, startAzureSimulator } from '../../sim/azure/simulator.ts';
import type { SimVm } from '../../sim/azure/world.ts';
import { bootstrapWith } from '../../testing/azure-bootstrap.ts';
import { simAzureClient } from '../../testing/azure-client.ts';
import type { IdentifyResult } from '../types.ts';
import { AzureCloudGroups } from './cloud-groups.ts';
import { AzureNodeIdentifier } from './node-identifier.ts';

const cluster = 'real.example.com';
let sim: AzureSimulator;
let nodes: SimVm[];

before(async () => {
  sim = await startAzureSimulator({ pageSize: 50 });
  sim.setReadBucket(undefined);
  nodes = sim.world.seedKopsCluster(cluster, [{ name: 'nodes', count: 120 }]).get('nodes') as SimVm[];
});
after(() => sim.close());

const client = () => simAzureClient(sim);
const identifier = () =>
  new AzureNodeIdentifier({ client: client(), clusterName: cluster, coalesceWindowMs: 1 });
/** Lets a listing pair's other request end before the next test queues its rewrite. */
const quiet = () => new Promise((resolve) => setTimeout(resolve, 100));

function failure(result: IdentifyResult | undefined): KopsError {
  assert.ok(result && !result.ok, `expected a failure, got ${JSON.stringify(result)}`);
  return result.error as KopsError;
}

/** ARM's answer to an api-version it does not serve for this type in this location (HTTP 400). */
const noRegisteredProvider: ArmRewrite = () => ({
  status: 400,
  body: {
    error: {
      code: 'NoRegisteredProviderFound',
      message:
        "No registered resource provider found for location 'eastus' and API version '2026-04-01' for type 'virtualMachineScaleSets'. The supported api-versions are '2024-07-01, 2024-11-01'.",
    },
  },
});

test('azure (real ARM): a VM being deleted is listed without instance view; it is refused as not running, and its scale set is still identified', async () => {
  const going = nodes[7] as SimVm;
  const staying = nodes[8] as SimVm;
  going.deleting = true;
  try {
    const [goingId, stayingId] = [sim.world.providerID(going), sim.world.providerID(staying)];
    const results = await identifier().identify([goingId, stayingId]);
    const refused = failure(results.get(goingId));
    assert.equal(refused.kind, 'forbidden', refused.message);
    assert.equal(refused.reasonCode, 'not-running', refused.message);
    const other = results.get(stayingId);
    assert.ok(other?.ok, other && !other.ok ? other.error.message : 'no result');
    assert.equal(other.identity.state, 'running');

    const [group] = await new AzureCloudGroups({ client: client() }).list(cluster);
    const member = group?.members.find((m) => m.instanceId === going.name);
    assert.equal(member?.healthy, false);
    assert.equal(member?.state, 'stopping');
  } finally {
    going.deleting = false;
  }
});

test('azure (real ARM): an api-version ARM does not serve there (400 NoRegisteredProviderFound) is a fault, never a verdict on the node', async () => {
  const vm = nodes[2] as SimVm;
  sim.rewriteNext(1, noRegisteredProvider, 'virtualMachineScaleSetVMs.list');
  try {
    const pid = sim.world.providerID(vm);
    const error = failure((await identifier().identify([pid])).get(pid));
    assert.equal(isCloudVerdict(error), false, `${error.name}: ${error.message}`);
    assert.equal(error.kind, 'unavailable', error.message);
    assert.match(error.message, /NoRegisteredProviderFound/);
  } finally {
    await quiet();
    sim.resetFaults();
  }

  // The bootstrap path: a 503 the node retries, not a denial.
  const decision = await bootstrapWith(
    sim,
    { clusterName: cluster, client: client() },
    vm,
    'virtualMachineScaleSetVMs.get',
    noRegisteredProvider,
  );
  assert.ok(isDependencyFault(decision), `expected a dependency fault, got ${JSON.stringify(decision)}`);
});

for (const [parameter, value] of [
  ['api-version', '2026-04-01'],
  ['$expand', 'instanceView'],
] as const) {
  test(`azure (real ARM): a nextLink without the listing's ${parameter} is followed with it (ARM needs the api-version; later pages need their instance views)`, async () => {
    const vm = nodes[110] as SimVm; // on the third page of 50
    sim.rewriteNext(
      2,
      ({ body }) => {
        const page = body as { nextLink?: string };
        if (!page.nextLink) return {};
        const next = new URL(page.nextLink);
        next.searchParams.delete(parameter);
        return { body: { ...page, nextLink: next.toString() } };
      },
      'virtualMachineScaleSetVMs.list',
    );
    try {
      const pid = sim.world.providerID(vm);
      const result = (await identifier().identify([pid])).get(pid);
      assert.ok(result?.ok, result && !result.ok ? result.error.message : 'no result');
      assert.equal(result.identity.instanceId, vm.name);
      const pages = sim.calls.filter((c) => c.operation === 'virtualMachineScaleSetVMs.list').slice(-3);
      for (const page of pages) assert.equal(page.query[parameter], value, JSON.stringify(page));
    } finally {
      await quiet();
      sim.resetFaults();
    }
  });
}

test("azure: a 404 without ARM's error body (an endpoint that is not ARM's, a proxy's page) is a fault; ARM's own 404 still says the VM does not exist", async () => {
  const vm = nodes[3] as SimVm;
  const pid = sim.world.providerID(vm);
  // A proxy's HTML page, and a gateway's JSON that is not ARM's (no `error.code`).
  for (const rewrite of [
    () => ({ status: 404, raw: '<html><body>404 Not Found</body></html>' }),
    () => ({ status: 404, body: { message: 'no Route matched with those values' } }),
  ]) {
    sim.rewriteNext(2, rewrite);
    try {
      const error = failure((await identifier().identify([pid])).get(pid));
      assert.equal(isCloudVerdict(error), false, `${error.name}: ${error.message}`);
      assert.equal(error.kind, 'unavailable', error.message);
    } finally {
      await quiet();
      sim.resetFaults();
    }
  }
  const gone = `${pid.slice(0, pid.lastIndexOf('/') + 1)}9999`;
  const error = failure((await identifier().identify([gone])).get(gone));
  assert.ok(isCloudVerdict(error), `${error.name}: ${error.message}`);
});
