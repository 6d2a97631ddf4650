import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { type AzureSimulator, startAzureSimulator } from '../../sim/azure/simulator.ts';
import type { SimVm } from '../../sim/azure/world.ts';
import { createAzureProvider } from './provider.ts';

let sim: AzureSimulator;
let controllerVm: SimVm;

before(async () => {
  sim = await startAzureSimulator({ resourceGroup: 'prod-rg' });
  controllerVm = sim.world
    .seedKopsCluster('prod.example.com', [{ name: 'cp', role: 'control-plane', count: 1 }])
    .get('cp')?.[0] as SimVm;
});
after(() => sim.close());

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
