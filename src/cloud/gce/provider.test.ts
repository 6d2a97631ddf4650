import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError } from '../../errors.ts';
import { simulatorAuth } from '../../sim/gce/clients.ts';
import { startGceSimulator } from '../../sim/gce/simulator.ts';
import { createGceProvider } from './provider.ts';

test('the provider identifies nodes and lists groups of one cluster through the simulator', async () => {
  const sim = await startGceSimulator({ project: 'wired' });
  try {
    const [node] = sim.seedInstanceGroup({
      zone: 'us-central1-f',
      instanceGroup: 'nodes',
      count: 2,
      clusterName: 'w.example.com',
    });
    const gce = await createGceProvider({
      project: 'wired',
      clusterName: 'w.example.com',
      endpoint: sim.endpoint,
      auth: simulatorAuth(sim),
    });
    const id = `gce://wired/us-central1-f/${node?.name}`;
    const result = (await gce.nodeIdentifier.identify([id])).get(id);
    assert.ok(result?.ok && result.identity.instanceGroup === 'nodes');
    const groups = await gce.cloudGroups.list('w.example.com');
    assert.deepEqual(
      groups.map((g) => [g.instanceGroup, g.members.length]),
      [['nodes', 2]],
    );
  } finally {
    await sim.close();
  }
});

test('an unknown project is a configuration error', async () => {
  const saved = process.env['GCP_PROJECT'];
  delete process.env['GCP_PROJECT'];
  try {
    await assert.rejects(createGceProvider({ project: undefined, clusterName: 'c' }), ConfigError);
  } finally {
    if (saved !== undefined) process.env['GCP_PROJECT'] = saved;
  }
});
