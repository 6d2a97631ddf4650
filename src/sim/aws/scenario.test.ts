import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { awsProviderID, clusterInstances, simInstanceId, simLaunchTemplateId } from './scenario.ts';
import { isInstanceId, isLaunchTemplateId } from './world.ts';

describe('AWS scenarios', () => {
  it('generates valid, distinct, deterministic instance ids', () => {
    assert.equal(simInstanceId(1), 'i-00000000000000001');
    assert.equal(simInstanceId(255), 'i-000000000000000ff');
    assert.ok(isInstanceId(simInstanceId(123_456)));
    assert.equal(simLaunchTemplateId(255), 'lt-000000000000000ff');
    assert.ok(isLaunchTemplateId(simLaunchTemplateId(123_456)));
  });

  it('spreads a group over its zones and tags it for the cluster', () => {
    const instances = clusterInstances({
      cluster: 'c',
      instanceGroup: 'nodes',
      count: 4,
      zones: ['z-a', 'z-b'],
      firstId: 10,
    });
    assert.deepEqual(
      instances.map((i) => [i.id, i.zone, i.cluster, i.instanceGroup]),
      [
        [simInstanceId(10), 'z-a', 'c', 'nodes'],
        [simInstanceId(11), 'z-b', 'c', 'nodes'],
        [simInstanceId(12), 'z-a', 'c', 'nodes'],
        [simInstanceId(13), 'z-b', 'c', 'nodes'],
      ],
    );
    assert.equal(awsProviderID({ id: 'i-00000001', zone: 'z-a' }), 'aws:///z-a/i-00000001');
  });
});
