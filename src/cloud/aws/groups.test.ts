import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { ConfigError } from '../../errors.ts';
import { clusterInstances, simInstanceId } from '../../sim/aws/scenario.ts';
import { type AwsSimulator, startAwsSimulator } from '../../sim/aws/server.ts';
import { type AwsClients, createAwsClients } from './clients.ts';
import { AwsCloudGroups, stateOfLifecycle } from './groups.ts';

const cluster = 'groups.example.com';

describe('AwsCloudGroups', () => {
  let sim: AwsSimulator;
  let clients: AwsClients;

  before(async () => {
    sim = await startAwsSimulator();
    sim.ec2.addInstances(clusterInstances({ cluster, instanceGroup: 'nodes', count: 3 }));
    sim.autoscaling.addAutoScalingGroup({
      name: `nodes.${cluster}`,
      cluster,
      instanceGroup: 'nodes',
      minSize: 2,
      maxSize: 5,
      desiredCapacity: 4,
      members: [
        simInstanceId(1),
        { instanceId: simInstanceId(2), healthStatus: 'Unhealthy' },
        { instanceId: simInstanceId(3), lifecycleState: 'Pending:Wait' },
      ],
    });
    // 230 more groups so that the listing spans three pages of 100.
    for (let g = 0; g < 230; g++) {
      sim.autoscaling.addAutoScalingGroup({
        name: `pool-${String(g).padStart(3, '0')}.${cluster}`,
        cluster,
        instanceGroup: `pool-${String(g).padStart(3, '0')}`,
      });
    }
    sim.autoscaling.addAutoScalingGroup({ name: 'bastions', cluster, tags: { unrelated: 'x' } });
    sim.autoscaling.addAutoScalingGroup({
      name: 'nodes.other.example.com',
      cluster: 'other.example.com',
      instanceGroup: 'nodes',
    });
    clients = await createAwsClients({
      region: sim.region,
      endpoint: sim.endpoint,
      credentials: sim.credentials,
    });
  });
  after(async () => {
    clients.destroy();
    await sim.close();
  });

  it("lists the cluster's groups across pages with sizes, members, lifecycle and health", async () => {
    sim.calls.reset();
    const groups = await new AwsCloudGroups({ autoscaling: clients.autoscaling }).list(cluster);
    assert.equal(sim.calls.count('DescribeAutoScalingGroups'), 3, 'three pages of up to 100');
    assert.equal(groups.length, 231, 'groups of other clusters and without an instance group are left out');
    const nodes = groups.find((g) => g.instanceGroup === 'nodes');
    assert.deepEqual(nodes, {
      instanceGroup: 'nodes',
      cloudName: `nodes.${cluster}`,
      minSize: 2,
      maxSize: 5,
      targetSize: 4,
      members: [
        {
          instanceId: simInstanceId(1),
          providerID: `aws:///us-east-1a/${simInstanceId(1)}`,
          state: 'running',
          healthy: true,
        },
        {
          instanceId: simInstanceId(2),
          providerID: `aws:///us-east-1b/${simInstanceId(2)}`,
          state: 'running',
          healthy: false,
        },
        {
          instanceId: simInstanceId(3),
          providerID: `aws:///us-east-1c/${simInstanceId(3)}`,
          state: 'pending',
          healthy: false,
        },
      ],
    });
    assert.deepEqual(
      groups.slice(0, 3).map((g) => g.instanceGroup),
      ['nodes', 'pool-000', 'pool-001'],
    );
  });

  it('maps Auto Scaling lifecycle states to instance states', () => {
    assert.equal(stateOfLifecycle('Pending:Proceed'), 'pending');
    assert.equal(stateOfLifecycle('InService'), 'running');
    assert.equal(stateOfLifecycle('Standby'), 'running');
    assert.equal(stateOfLifecycle('Terminating:Wait'), 'stopping');
    assert.equal(stateOfLifecycle('Terminated'), 'terminated');
    assert.equal(stateOfLifecycle('Warmed:Stopped'), 'stopped');
    assert.equal(stateOfLifecycle(undefined), 'unknown');
  });

  it('reports rejected credentials as a configuration error', async () => {
    const denied = await createAwsClients({
      region: sim.region,
      endpoint: sim.endpoint,
      credentials: { ...sim.credentials, secretAccessKey: 'x' },
      maxAttempts: 1,
    });
    try {
      await assert.rejects(
        new AwsCloudGroups({ autoscaling: denied.autoscaling }).list(cluster),
        ConfigError,
      );
    } finally {
      denied.destroy();
    }
  });
});
