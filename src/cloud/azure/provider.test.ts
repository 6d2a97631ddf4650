import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { type AzureSimulator, startAzureSimulator } from '../../sim/azure/simulator.ts';
import type { SimVm } from '../../sim/azure/world.ts';
import { createAzureProvider } from './provider.ts';

let sim: AzureSimulator;
let controllerVm: SimVm;
/** The variables this file sets, as they were. */
const savedEnv = Object.fromEntries(
  ['HTTPS_PROXY', 'NO_PROXY', 'AZURE_RESOURCE_MANAGER_ENDPOINT'].map((name) => [name, process.env[name]]),
);

before(async () => {
  // A proxy that refuses everything, bypassed for loopback only: a request meant for the public ARM
  // fails here instead of leaving the machine. Set before the first client, which reads them once.
  process.env['HTTPS_PROXY'] = 'http://127.0.0.1:9';
  process.env['NO_PROXY'] = '127.0.0.1,localhost';
  sim = await startAzureSimulator({ resourceGroup: 'prod-rg' });
  controllerVm = sim.world
    .seedKopsCluster('prod.example.com', [{ name: 'cp', role: 'control-plane', count: 1 }])
    .get('cp')?.[0] as SimVm;
});
after(async () => {
  await sim.close();
  for (const [name, value] of Object.entries(savedEnv)) {
    if (value === undefined) delete process.env[name];
    else process.env[name] = value;
  }
});

test("scopes itself to the subscription and resource group IMDS reports for the controller's VM", async () => {
  const provider = await createAzureProvider({
    clusterName: 'prod.example.com',
    credential: sim.credential,
    endpoint: sim.armEndpoint,
    caPem: sim.caPem,
    imdsUrl: sim.imdsUrlOf(controllerVm.name),
  });
  assert.equal(provider.client.subscriptionId, sim.world.subscriptionId);
  assert.equal(provider.client.resourceGroup, 'prod-rg');
  assert.equal(provider.identifiesByNodeName, false);
  const pid = sim.world.providerID(controllerVm);
  const result = (await provider.nodeIdentifier.identify([pid])).get(pid);
  assert.ok(result?.ok);
  assert.equal(result.identity.instanceGroup, 'cp');
  assert.deepEqual(
    (await provider.cloudGroups.list('prod.example.com')).map((g) => g.instanceGroup),
    ['cp'],
  );
  provider.close();
});

test('without configuration and without IMDS it is a ConfigError naming what to set', async () => {
  await assert.rejects(
    createAzureProvider({ clusterName: 'c', credential: sim.credential, imdsUrl: 'http://127.0.0.1:9' }),
    { name: 'ConfigError', message: /subscription and resource group are not configured/ },
  );
});

test('AZURE_RESOURCE_MANAGER_ENDPOINT moves ARM when no endpoint is configured', async () => {
  process.env['AZURE_RESOURCE_MANAGER_ENDPOINT'] = sim.armEndpoint;
  try {
    const provider = await createAzureProvider({
      clusterName: 'prod.example.com',
      subscriptionId: sim.world.subscriptionId,
      resourceGroup: 'prod-rg',
      credential: sim.credential,
      caPem: sim.caPem,
    });
    const pid = sim.world.providerID(controllerVm);
    const before = sim.count('virtualMachineScaleSetVMs.list');
    const result = (await provider.nodeIdentifier.identify([pid])).get(pid);
    assert.ok(result?.ok, result && !result.ok ? result.error.message : 'no result');
    assert.ok(sim.count('virtualMachineScaleSetVMs.list') > before, 'the simulated ARM was asked');
    provider.close();
  } finally {
    delete process.env['AZURE_RESOURCE_MANAGER_ENDPOINT'];
  }
});
