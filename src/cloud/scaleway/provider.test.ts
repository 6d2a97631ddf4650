import assert from 'node:assert/strict';
import { after, afterEach, before, test } from 'node:test';
import { ConfigError } from '../../errors.ts';
import { type ScalewaySimulator, startScalewaySimulator } from '../../sim/scaleway/simulator.ts';
import { createScalewayProvider } from './provider.ts';

const cluster = 'prod.example.com';
let sim: ScalewaySimulator;
const saved = { ...process.env };
before(async () => {
  sim = await startScalewaySimulator({ zone: 'nl-ams-1' });
});
after(() => sim.close());
afterEach(() => {
  for (const key of Object.keys(sim.env)) {
    if (saved[key] === undefined) delete process.env[key];
    else process.env[key] = saved[key];
  }
});

test("from the SCW_* environment, the zone from the controller's own metadata when SCW_DEFAULT_ZONE is unset", async () => {
  Object.assign(process.env, sim.env);
  delete process.env['SCW_DEFAULT_ZONE'];
  const self = sim.addServer({ name: 'control-plane-1' });
  const node = sim.addServer({
    name: 'nodes-1',
    tags: [`noprefix=kops.k8s.io/cluster=${cluster}`, 'noprefix=kops.k8s.io/instance-group=nodes'],
  });
  const provider = await createScalewayProvider({
    clusterName: cluster,
    metadataUrl: sim.metadataUrl(self.id),
  });
  assert.equal(provider.clients.zone, 'nl-ams-1');
  const providerID = `scaleway://instance/nl-ams-1/${node.id}`;
  const result = (await provider.nodeIdentifier.identify([providerID])).get(providerID);
  assert.equal(result?.ok && result.identity.instanceGroup, 'nodes');
  assert.deepEqual(
    (await provider.cloudGroups.list(cluster)).map((g) => g.instanceGroup),
    ['nodes'],
  );
});

test('no zone anywhere, or missing keys, is a ConfigError naming what to set', async () => {
  Object.assign(process.env, sim.env);
  delete process.env['SCW_DEFAULT_ZONE'];
  await assert.rejects(
    createScalewayProvider({ clusterName: cluster, metadataUrl: sim.metadataUrl('no-such-server') }),
    (err: unknown) => err instanceof ConfigError && /set SCW_DEFAULT_ZONE/.test(err.message),
  );
  process.env['SCW_DEFAULT_ZONE'] = 'fr-par-1';
  delete process.env['SCW_SECRET_KEY'];
  await assert.rejects(
    createScalewayProvider({ clusterName: cluster }),
    (err: unknown) => err instanceof ConfigError && /SCW_SECRET_KEY must be set/.test(err.message),
  );
});
