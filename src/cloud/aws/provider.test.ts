import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { clusterInstances } from '../../sim/aws/scenario.ts';
import { startAwsSimulator } from '../../sim/aws/server.ts';
import { createAwsProvider } from './provider.ts';

describe('createAwsProvider', () => {
  it('wires node identity and cloud groups to the same endpoint and region', async () => {
    const sim = await startAwsSimulator({ region: 'eu-central-1' });
    const cluster = 'wired.example.com';
    const [instance] = sim.ec2.addInstances(
      clusterInstances({ cluster, instanceGroup: 'nodes', count: 1, zones: ['eu-central-1a'] }),
    );
    sim.autoscaling.addAutoScalingGroup({
      name: `nodes.${cluster}`,
      cluster,
      instanceGroup: 'nodes',
      members: [instance?.id as string],
    });
    const provider = await createAwsProvider({
      clusterName: cluster,
      region: 'eu-central-1',
      endpoint: sim.endpoint,
      credentials: sim.credentials,
    });
    try {
      assert.equal(provider.clients.region, 'eu-central-1');
      const providerID = `aws:///eu-central-1a/${instance?.id}`;
      const result = (await provider.nodeIdentifier.identify([providerID])).get(providerID);
      assert.ok(result?.ok);
      assert.equal(result.identity.instanceGroup, 'nodes');
      assert.match(
        result.identity.addresses.find((a) => a.type === 'InternalDNS')?.address ?? '',
        /\.eu-central-1\.compute\.internal$/,
      );
      const groups = await provider.cloudGroups.list(cluster);
      assert.deepEqual(
        groups.map((g) => [g.instanceGroup, g.members.map((m) => m.providerID)]),
        [['nodes', [providerID]]],
      );
    } finally {
      provider.clients.destroy();
      await sim.close();
    }
  });
});
