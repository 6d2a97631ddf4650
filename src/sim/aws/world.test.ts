import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { simLaunchTemplateId } from './scenario.ts';
import { AwsWorld, isInstanceId, kopsTags, type SimGroupLaunch } from './world.ts';

describe('AwsWorld', () => {
  it('writes the tags kops puts on a cluster instance', () => {
    assert.deepEqual(kopsTags('c.example.com', 'nodes'), {
      KubernetesCluster: 'c.example.com',
      'kubernetes.io/cluster/c.example.com': 'owned',
      'kops.k8s.io/instancegroup': 'nodes',
    });
    assert.deepEqual(kopsTags(undefined, undefined), {});
  });

  it('accepts 8- and 17-digit instance ids only', () => {
    assert.ok(isInstanceId('i-0123abcd'));
    assert.ok(isInstanceId('i-0123456789abcdef0'));
    assert.ok(!isInstanceId('i-0123456789ABCDEF0'));
    assert.ok(!isInstanceId('i-0123abc'));
    assert.throws(
      () => new AwsWorld('1', 'us-east-1').addInstances([{ id: 'bogus', zone: 'a' }]),
      /not an EC2 instance id/,
    );
  });

  it('launch times: now by default, kept when a record is re-added, moved by a start; a private IP can go to a new instance', () => {
    const world = new AwsWorld('111122223333', 'us-east-1');
    const before = Date.now();
    const [a] = world.addInstances([{ id: 'i-0000000a', zone: 'us-east-1a', privateIp: '10.0.0.5' }]);
    assert.ok(a && a.launchTime.getTime() >= before && a.launchTime.getTime() <= Date.now());
    const launched = a.launchTime;
    world.addInstances([
      { id: 'i-0000000a', zone: 'us-east-1a', privateIp: '10.0.0.5', publicIp: '203.0.113.1' },
    ]);
    assert.equal(world.instance('i-0000000a')?.launchTime, launched, 'a changed record, not a new launch');
    world.setInstanceState('i-0000000a', 'stopped');
    const started = new Date('2026-07-01T00:00:00Z');
    world.startInstance('i-0000000a', started);
    assert.equal(world.instance('i-0000000a')?.state, 'running');
    assert.equal(world.instance('i-0000000a')?.launchTime, started);
    assert.throws(() => world.startInstance('i-0000000f'), /no instance/);
    // Terminated, its address goes to the next instance launched in the subnet (and its IP-based name).
    world.setInstanceState('i-0000000a', 'terminated');
    const [b] = world.addInstances([{ id: 'i-0000000b', zone: 'us-east-1a', privateIp: '10.0.0.5' }]);
    assert.equal(b?.privateDnsName, world.instance('i-0000000a')?.privateDnsName);
  });

  it('gives instances addresses and DNS names in the region domain', () => {
    const world = new AwsWorld('111122223333', 'eu-west-1');
    const [a, b] = world.addInstances([
      { id: 'i-00000001', zone: 'eu-west-1a' },
      { id: 'i-00000002', zone: 'eu-west-1b', tags: { KubernetesCluster: 'override' }, cluster: 'c' },
    ]);
    assert.equal(a?.privateIp, '10.0.0.1');
    assert.equal(a?.privateDnsName, 'ip-10-0-0-1.eu-west-1.compute.internal');
    assert.equal(a?.state, 'running');
    assert.equal(b?.tags['KubernetesCluster'], 'override', 'explicit tags win over the shorthands');
    world.setInstanceState('i-00000001', 'stopped');
    assert.equal(world.instance('i-00000001')?.state, 'stopped');
    world.removeInstance('i-00000002');
    assert.deepEqual(
      world.instances().map((i) => i.id),
      ['i-00000001'],
    );
    assert.throws(() => world.setInstanceState('i-00000002', 'running'), /no instance/);
  });

  it('derives group members from the instances and sizes from the members', () => {
    const world = new AwsWorld('1', 'us-east-1');
    world.addInstances([
      { id: 'i-00000001', zone: 'us-east-1c', state: 'pending' },
      { id: 'i-00000002', zone: 'us-east-1a', state: 'shutting-down' },
    ]);
    const group = world.addAutoScalingGroup({
      name: 'g',
      members: ['i-00000001', 'i-00000002', 'i-00000003'],
    });
    assert.deepEqual(
      group.members.map((m) => [m.instanceId, m.zone, m.lifecycleState]),
      [
        ['i-00000001', 'us-east-1c', 'Pending'],
        ['i-00000002', 'us-east-1a', 'Terminating'],
        ['i-00000003', 'us-east-1a', 'InService'],
      ],
    );
    assert.deepEqual([group.minSize, group.maxSize, group.desiredCapacity], [3, 3, 3]);
    world.addAutoScalingGroup({ name: 'a' });
    assert.deepEqual(
      world.autoScalingGroups().map((g) => g.name),
      ['a', 'g'],
    );
  });

  it('issues credentials whose identity STS reports', () => {
    const world = new AwsWorld('111122223333', 'us-east-1');
    const user = world.addUser('admin');
    assert.match(user.accessKeyId, /^AKIA[A-Z2-7]{16}$/);
    assert.equal(world.principal(user.accessKeyId)?.identity.arn, 'arn:aws:iam::111122223333:user/admin');
    const session = world.addInstanceProfileSession('nodes.c', 'i-00000001');
    assert.match(session.accessKeyId, /^ASIA/);
    assert.ok(session.sessionToken);
    assert.equal(
      world.principal(session.accessKeyId)?.identity.arn,
      'arn:aws:sts::111122223333:assumed-role/nodes.c/i-00000001',
    );
    world.removeCredentials(session.accessKeyId);
    assert.equal(world.principal(session.accessKeyId), undefined);
  });

  it('keeps launch templates with their latest and default versions; refuses a malformed id or version', () => {
    const world = new AwsWorld('1', 'us-east-1');
    const id = simLaunchTemplateId(1);
    assert.deepEqual(
      [world.addLaunchTemplate({ id }).latestVersion, world.launchTemplate(id)?.defaultVersion],
      [1, 1],
    );
    world.addLaunchTemplate({ id, name: 'nodes.c', latestVersion: 3, defaultVersion: 2 });
    assert.deepEqual(
      world.launchTemplates().map((t) => [t.id, t.name, t.latestVersion, t.defaultVersion]),
      [[id, 'nodes.c', 3, 2]],
      'a new version replaces the template, as CreateLaunchTemplateVersion does',
    );
    assert.throws(() => world.addLaunchTemplate({ id: 'lt-1' }), /not a launch template id/);
    assert.throws(
      () => world.addLaunchTemplate({ id, latestVersion: 2, defaultVersion: 3 }),
      /versions 1 to 2/,
    );
  });

  it('launches members from the version $Latest or $Default stands for now, unless a member says otherwise', () => {
    const world = new AwsWorld('1', 'us-east-1');
    const id = simLaunchTemplateId(2);
    world.addLaunchTemplate({ id, latestVersion: 4, defaultVersion: 2 });
    const launchedFrom = (launch: SimGroupLaunch) =>
      world
        .addAutoScalingGroup({
          name: 'g',
          launch,
          members: [
            'i-00000001',
            { instanceId: 'i-00000002', launchedFrom: { launchConfigurationName: 'old' } },
          ],
        })
        .members.map((m) => m.launchedFrom);
    const old = { launchConfigurationName: 'old' };
    assert.deepEqual(launchedFrom({ launchTemplate: { id, version: '$Latest' } }), [
      { launchTemplate: { id, version: '4' } },
      old,
    ]);
    assert.deepEqual(launchedFrom({ mixedInstancesPolicy: { launchTemplate: { id } } }), [
      { launchTemplate: { id, version: '2' } },
      old,
    ]);
    assert.deepEqual(launchedFrom({ launchTemplate: { id, version: '3' } }), [
      { launchTemplate: { id, version: '3' } },
      old,
    ]);
    assert.deepEqual(launchedFrom({ launchConfigurationName: 'lc-2' }), [
      { launchConfigurationName: 'lc-2' },
      old,
    ]);
    assert.equal(
      world.addAutoScalingGroup({ name: 'bare', members: ['i-00000003'] }).members[0]?.launchedFrom,
      undefined,
    );
    assert.throws(
      () => launchedFrom({ launchTemplate: { id: simLaunchTemplateId(9) } }),
      /names launch template lt-0+9, which does not exist/,
    );
  });

  it('records the actions a user may not call', () => {
    const world = new AwsWorld('1', 'us-east-1');
    const limited = world.addUser('control-plane', { deniedActions: ['ec2:DescribeLaunchTemplates'] });
    const full = world.addUser('admin');
    assert.deepEqual(
      [...(world.principal(limited.accessKeyId)?.deniedActions ?? [])],
      ['ec2:DescribeLaunchTemplates'],
    );
    assert.equal(world.principal(full.accessKeyId)?.deniedActions.size, 0);
  });
});
