import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { type OpenStackSimulator, startOpenStackSimulator } from '../../sim/openstack/simulator.ts';
import { openstackAuthFromEnv } from './auth.ts';
import { createOpenStackProvider } from './provider.ts';

const cluster = 'prod.example.com';
let sim: OpenStackSimulator;
before(async () => {
  sim = await startOpenStackSimulator();
});
after(() => sim.close());

test('the provider identifies nodes and lists groups with the OS_* credentials, counting its calls', async () => {
  const node = sim.addServer({
    name: 'nodes-1',
    metadata: { KubernetesCluster: cluster, KopsInstanceGroup: 'nodes' },
  });
  const counted: string[] = [];
  const provider = createOpenStackProvider({
    clusterName: cluster,
    auth: openstackAuthFromEnv(sim.env),
    cloudCalls: {
      request: (cloud, call, result) => counted.push(`${cloud}/${call}/${result}`),
      duration: () => undefined,
    },
  });
  const providerID = `openstack:///${node.id}`;
  const result = (await provider.nodeIdentifier.identify([providerID])).get(providerID);
  assert.equal(result?.ok && result.identity.instanceGroup, 'nodes');
  assert.deepEqual(
    (await provider.cloudGroups.list(cluster)).map((g) => [g.instanceGroup, g.members.length]),
    [['nodes', 1]],
  );
  assert.deepEqual(counted, [
    'openstack/tokens.create/ok',
    'openstack/servers.get/ok',
    'openstack/servers.list/ok',
  ]);
  provider.close();
});
