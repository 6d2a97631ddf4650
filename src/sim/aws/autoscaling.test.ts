import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { describeAutoScalingGroups, describeWarmPool } from './autoscaling.ts';
import { AwsSimError } from './query.ts';
import { simLaunchTemplateId } from './scenario.ts';
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

describe('simulated DescribeWarmPool', () => {
  const world = new AwsWorld('111122223333', 'us-east-1');
  world.addAutoScalingGroup({
    name: 'warm.c',
    cluster: 'c',
    instanceGroup: 'nodes',
    zones: ['us-east-1b'],
    warmPool: {
      minSize: 1,
      instances: ['i-w1', { instanceId: 'i-w2', lifecycleState: 'Warmed:Pending:Wait' }],
    },
  });
  world.addAutoScalingGroup({ name: 'cold.c', cluster: 'c', instanceGroup: 'cold' });

  it("answers with the pool's configuration and its instances in Warmed states, paged by MaxRecords", () => {
    const first = describeWarmPool(
      world,
      new Map([
        ['AutoScalingGroupName', 'warm.c'],
        ['MaxRecords', '1'],
      ]),
    );
    assert.match(
      first,
      /^<\?xml[^>]*\?>\n?<DescribeWarmPoolResponse xmlns="http:\/\/autoscaling\.amazonaws\.com\/doc\/2011-01-01\/"><DescribeWarmPoolResult><WarmPoolConfiguration><MinSize>1<\/MinSize><PoolState>Stopped<\/PoolState>/,
    );
    assert.match(
      first,
      /<Instances><member><InstanceId>i-w1<\/InstanceId><InstanceType>t3\.medium<\/InstanceType><AvailabilityZone>us-east-1b<\/AvailabilityZone><LifecycleState>Warmed:Stopped<\/LifecycleState><HealthStatus>Healthy<\/HealthStatus><ProtectedFromScaleIn>false<\/ProtectedFromScaleIn><\/member><\/Instances>/,
    );
    const token = /<NextToken>([^<]+)<\/NextToken>/.exec(first)?.[1];
    assert.ok(token);
    const second = describeWarmPool(
      world,
      new Map([
        ['AutoScalingGroupName', 'warm.c'],
        ['MaxRecords', '1'],
        ['NextToken', token],
      ]),
    );
    assert.match(second, /<InstanceId>i-w2<\/InstanceId>.*<LifecycleState>Warmed:Pending:Wait</);
    assert.doesNotMatch(second, /<NextToken>/);
  });

  it('answers a group without a warm pool with nothing, and rejects a missing or unknown group and sizes over 50', () => {
    const cold = describeWarmPool(world, new Map([['AutoScalingGroupName', 'cold.c']]));
    assert.match(cold, /<DescribeWarmPoolResult><Instances\/><\/DescribeWarmPoolResult>/);
    assert.throws(() => describeWarmPool(world, new Map()), { code: 'ValidationError' });
    assert.throws(() => describeWarmPool(world, new Map([['AutoScalingGroupName', 'nope']])), {
      code: 'ValidationError',
      message: 'AutoScalingGroup name not found - nope',
    });
    assert.throws(
      () =>
        describeWarmPool(
          world,
          new Map([
            ['AutoScalingGroupName', 'warm.c'],
            ['MaxRecords', '51'],
          ]),
        ),
      AwsSimError,
    );
  });
});

describe('what simulated groups and members launch from, as DescribeAutoScalingGroups renders it', () => {
  const world = new AwsWorld('111122223333', 'us-east-1');
  const id = simLaunchTemplateId(1);
  world.addLaunchTemplate({ id, name: 'nodes.c', latestVersion: 3 });
  const render = (name: string) =>
    describeAutoScalingGroups(world, new Map([['AutoScalingGroupNames.member.1', name]]));

  it('a launch template by id, name and version as the group names it; members with the number they used', () => {
    world.addAutoScalingGroup({
      name: 'lt',
      launch: { launchTemplate: { id, version: '$Latest' } },
      members: [
        'i-00000001',
        { instanceId: 'i-00000002', launchedFrom: { launchTemplate: { id, version: '2' } } },
      ],
    });
    const xml = render('lt');
    const spec = (version: string) =>
      `<LaunchTemplate><LaunchTemplateId>${id}</LaunchTemplateId><LaunchTemplateName>nodes.c</LaunchTemplateName><Version>${version}</Version></LaunchTemplate>`;
    assert.ok(
      xml.includes(`<AutoScalingGroupARN>`) && xml.includes(`</AutoScalingGroupARN>${spec('$Latest')}`),
    );
    assert.ok(xml.includes(`<HealthStatus>Healthy</HealthStatus>${spec('3')}`), 'i-00000001 from version 3');
    assert.ok(xml.includes(`<HealthStatus>Healthy</HealthStatus>${spec('2')}`), 'i-00000002 from version 2');
  });

  it('a mixed-instances policy with its template and overrides; a launch configuration by name', () => {
    world.addAutoScalingGroup({
      name: 'spot',
      launch: { mixedInstancesPolicy: { launchTemplate: { id }, instanceTypes: ['m5.large', 'm6i.large'] } },
      members: ['i-00000003'],
    });
    const spot = render('spot');
    assert.match(
      spot,
      new RegExp(
        `<MixedInstancesPolicy><LaunchTemplate><LaunchTemplateSpecification><LaunchTemplateId>${id}</LaunchTemplateId><LaunchTemplateName>nodes.c</LaunchTemplateName></LaunchTemplateSpecification><Overrides><member><InstanceType>m5.large</InstanceType></member><member><InstanceType>m6i.large</InstanceType></member></Overrides></LaunchTemplate><InstancesDistribution>`,
      ),
    );
    assert.match(
      spot,
      new RegExp(
        `<LaunchTemplateId>${id}</LaunchTemplateId><LaunchTemplateName>nodes.c</LaunchTemplateName><Version>1</Version>`,
      ),
      'the default version',
    );
    world.addAutoScalingGroup({
      name: 'lc',
      launch: { launchConfigurationName: 'nodes-lc-2' },
      members: ['i-00000004'],
    });
    const lc = render('lc');
    assert.equal(lc.match(/<LaunchConfigurationName>nodes-lc-2<\/LaunchConfigurationName>/g)?.length, 2);
    assert.doesNotMatch(lc, /<LaunchTemplate>/);
  });
});
