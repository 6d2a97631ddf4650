import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { describeAutoScalingGroups } from './autoscaling.ts';
import { AwsSimError } from './query.ts';
import { AwsWorld } from './world.ts';

describe('simulated DescribeAutoScalingGroups', () => {
  const world = new AwsWorld('111122223333', 'us-east-1');
  world.addAutoScalingGroup({
    name: 'nodes.c',
    cluster: 'c',
    instanceGroup: 'nodes',
    minSize: 1,
    maxSize: 4,
    desiredCapacity: 2,
  });
  world.addAutoScalingGroup({ name: 'nodes.d', cluster: 'd', instanceGroup: 'nodes' });

  it('selects by name and by tag filter', () => {
    const byName = describeAutoScalingGroups(world, new Map([['AutoScalingGroupNames.member.1', 'nodes.d']]));
    assert.match(byName, /<AutoScalingGroupName>nodes\.d<\/AutoScalingGroupName>/);
    assert.doesNotMatch(byName, /nodes\.c/);
    const byTag = describeAutoScalingGroups(
      world,
      new Map([
        ['Filters.member.1.Name', 'tag:KubernetesCluster'],
        ['Filters.member.1.Values.member.1', 'c'],
      ]),
    );
    assert.match(byTag, /<MinSize>1<\/MinSize><MaxSize>4<\/MaxSize><DesiredCapacity>2<\/DesiredCapacity>/);
    assert.doesNotMatch(byTag, /nodes\.d/);
    assert.match(byTag, /<ResponseMetadata><RequestId>/);
  });

  it('pages by MaxRecords and rejects unsupported filters and sizes', () => {
    const first = describeAutoScalingGroups(world, new Map([['MaxRecords', '1']]));
    const token = /<NextToken>([^<]+)<\/NextToken>/.exec(first)?.[1];
    assert.ok(token);
    const second = describeAutoScalingGroups(
      world,
      new Map([
        ['MaxRecords', '1'],
        ['NextToken', token],
      ]),
    );
    assert.match(second, /nodes\.d/);
    assert.doesNotMatch(second, /<NextToken>/);
    assert.throws(() => describeAutoScalingGroups(world, new Map([['MaxRecords', '101']])), AwsSimError);
    assert.throws(
      () =>
        describeAutoScalingGroups(
          world,
          new Map([
            ['Filters.member.1.Name', 'instance-type'],
            ['Filters.member.1.Values.member.1', 'x'],
          ]),
        ),
      /not supported/,
    );
  });
});
