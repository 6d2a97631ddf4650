import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Instance as AsgInstance, AutoScalingGroup } from '@aws-sdk/client-auto-scaling';
import { ConfigError, UnavailableError } from '../../errors.ts';
import { createLogger, type Logger } from '../../log.ts';
import { instanceGroupHealth } from '../../metrics/instance-group-health.ts';
import { validationGaugesOf } from '../../metrics/validation-metrics.ts';
import { clusterInstances, simInstanceId, simLaunchTemplateId } from '../../sim/aws/scenario.ts';
import { type AwsSimulator, startAwsSimulator } from '../../sim/aws/server.ts';
import type { Ec2StateName, SimAutoScalingGroupInput, SimGroupLaunch } from '../../sim/aws/world.ts';
import type { InstanceGroup } from '../../statestore/kops-types.ts';
import { type NodeInfo, validateCluster } from '../../validation/validate-cluster.ts';
import type { CloudGroup } from '../types.ts';
import { type AwsClients, createAwsClients } from './clients.ts';
import { AwsCloudGroups, launchedFrom, launchSpecOf, stateOfLifecycle } from './groups.ts';
import type { SigV4Credentials } from './sigv4.ts';

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
      warmPool: { instances: [{ instanceId: 'i-warm', zone: 'us-east-1a' }] },
    });
    // Lifecycle states kops treats apart (upup/pkg/fi/cloudup/awsup/aws_cloud.go buildCloudInstance).
    sim.autoscaling.addAutoScalingGroup({
      name: `draining.${cluster}`,
      cluster,
      instanceGroup: 'draining',
      zones: ['us-east-1a'],
      members: [
        { instanceId: 'i-terminating', lifecycleState: 'Terminating' },
        { instanceId: 'i-hook-wait', lifecycleState: 'Terminating:Wait' },
        { instanceId: 'i-hook-proceed', lifecycleState: 'Terminating:Proceed' },
      ],
      warmPool: {
        poolState: 'Running',
        instances: [
          ...Array.from({ length: 120 }, (_, i) => `i-warm${String(i).padStart(3, '0')}`),
          { instanceId: 'i-warm-leaving', lifecycleState: 'Warmed:Terminating' },
        ],
      },
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
    assert.equal(groups.length, 232, 'groups of other clusters and without an instance group are left out');
    assert.equal(
      sim.calls.count('DescribeWarmPool'),
      232 + 2,
      "one call per group, as kops makes it, and two more pages of the 121-instance pool's 50",
    );
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
        {
          instanceId: 'i-warm',
          providerID: 'aws:///us-east-1a/i-warm',
          state: 'stopped',
          healthy: false,
          warmPool: true,
        },
      ],
    });
    assert.deepEqual(
      groups.slice(0, 3).map((g) => g.instanceGroup),
      ['draining', 'nodes', 'pool-000'],
    );
  });

  it('drops Terminating members, keeps Terminating:Wait/:Proceed and lists every warm-pool page, as kops', async () => {
    const groups = await new AwsCloudGroups({ autoscaling: clients.autoscaling }).list(cluster);
    const draining = groups.find((g) => g.instanceGroup === 'draining');
    const members = draining?.members ?? [];
    assert.deepEqual(
      members.slice(0, 2).map((m) => [m.instanceId, m.state, m.warmPool]),
      [
        ['i-hook-wait', 'stopping', undefined],
        ['i-hook-proceed', 'stopping', undefined],
      ],
      'an instance in exactly Terminating is ignored; those held by a lifecycle hook stay members',
    );
    const warm = members.slice(2);
    assert.equal(warm.length, 121, 'all three pages of the warm pool');
    assert.ok(warm.every((m) => m.warmPool === true));
    assert.deepEqual(
      [warm[0]?.state, warm[119]?.instanceId, warm[120]?.instanceId, warm[120]?.state],
      ['running', 'i-warm119', 'i-warm-leaving', 'stopping'],
      'a Warmed:Running pool is running; Warmed:Terminating is not the Terminating kops drops',
    );
    assert.equal(draining?.targetSize, 3, "the group's DesiredCapacity, which its warm pool is outside of");
  });

  it("a DescribeWarmPool denial (kops' control-plane role lacks it) lists no warm pool, with one warning", async () => {
    // A role whose policy does not allow the action: AWS answers AccessDenied to every call.
    const role = sim.sts.addUser('kops-control-plane', { deniedActions: ['autoscaling:DescribeWarmPool'] });
    const strict = await createAwsClients({
      region: sim.region,
      endpoint: sim.endpoint,
      credentials: role,
      maxAttempts: 1,
    });
    const lines: string[] = [];
    const logger = createLogger({
      level: 'warn',
      destination: { write: (line: string) => lines.push(line) },
    });
    try {
      const groups = await new AwsCloudGroups({ autoscaling: strict.autoscaling, logger }).list(cluster);
      const nodes = groups.find((g) => g.instanceGroup === 'nodes');
      assert.deepEqual(
        nodes?.members.map((m) => m.instanceId),
        [simInstanceId(1), simInstanceId(2), simInstanceId(3)],
        'the members without the warm pool: a group can only look smaller, never ready when it is not',
      );
      assert.equal(lines.length, 1, 'one warning, not one per group');
      const record = JSON.parse(lines[0] ?? '{}') as { level: string; msg: string; err: string };
      assert.equal(record.level, 'warn');
      assert.match(record.msg, /^warm pools are not listed/);
      assert.match(record.err, /AccessDenied.*grant autoscaling:DescribeWarmPool/);
    } finally {
      strict.destroy();
    }
  });

  it('a DescribeWarmPool outage fails the listing instead of returning a partial one', async () => {
    const strict = await createAwsClients({
      region: sim.region,
      endpoint: sim.endpoint,
      credentials: sim.credentials,
      maxAttempts: 1,
    });
    strict.autoscaling.middlewareStack.add(
      (next, context) => (args) => {
        if (context.commandName === 'DescribeWarmPoolCommand') {
          sim.faults.add({
            service: 'autoscaling',
            count: 1,
            error: { code: 'ServiceUnavailable', status: 503 },
          });
        }
        return next(args);
      },
      { step: 'initialize' },
    );
    try {
      await assert.rejects(
        new AwsCloudGroups({ autoscaling: strict.autoscaling }).list(cluster),
        (err: Error) => err instanceof UnavailableError && /DescribeWarmPool/.test(err.message),
      );
    } finally {
      sim.faults.reset();
      strict.destroy();
    }
  });

  it('a NextToken Auto Scaling answers again (a broken proxy) fails the listing; it is not followed for ever', async () => {
    // Every page after the first carries the first page's token again: page 2, for ever.
    let first: string | undefined;
    sim.faults.add({
      service: 'autoscaling',
      count: 3_000,
      rewrite: (xml) => {
        first ??= /<NextToken>([^<]*)<\/NextToken>/.exec(xml)?.[1];
        return xml.replace(/<NextToken>[^<]*<\/NextToken>/, `<NextToken>${first}</NextToken>`);
      },
    });
    sim.calls.reset();
    try {
      await assert.rejects(
        new AwsCloudGroups({ autoscaling: clients.autoscaling, ec2: clients.ec2 }).list(cluster),
        (err: Error) =>
          err instanceof UnavailableError &&
          /DescribeAutoScalingGroups answered a NextToken it had already answered/.test(err.message) &&
          (err as UnavailableError).details?.['reason'] === 'malformed-answer',
      );
      assert.ok(
        sim.calls.count('DescribeAutoScalingGroups') <= 3,
        `${sim.calls.count('DescribeAutoScalingGroups')} calls`,
      );
    } finally {
      sim.faults.reset();
    }
  });

  it('maps Auto Scaling lifecycle states to instance states', () => {
    assert.equal(stateOfLifecycle('Pending:Proceed'), 'pending');
    assert.equal(stateOfLifecycle('InService'), 'running');
    assert.equal(stateOfLifecycle('Standby'), 'running');
    assert.equal(stateOfLifecycle('Terminating:Wait'), 'stopping');
    assert.equal(stateOfLifecycle('Terminated'), 'terminated');
    assert.equal(stateOfLifecycle('Warmed:Stopped'), 'stopped');
    assert.equal(stateOfLifecycle('Warmed:Hibernated'), 'stopped');
    assert.equal(stateOfLifecycle('Warmed:Running'), 'running');
    assert.equal(stateOfLifecycle('Warmed:Pending:Wait'), 'pending');
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

// What kops gives for this cluster: pkg/validation/validate_cluster.go validateNodes over the members
// upup/pkg/fi/cloudup/awsup/aws_cloud.go lists (the warm pool included, `Terminating` left out).
describe('a simulated AWS cluster with a warm pool, validated as kops does', () => {
  const warmCluster = 'warm.example.com';
  let sim: AwsSimulator;
  let clients: AwsClients;
  const nodesGroup = {
    apiVersion: 'kops.k8s.io/v1alpha2',
    kind: 'InstanceGroup',
    metadata: { name: 'nodes' },
  };
  const instanceGroups = [{ ...nodesGroup, spec: { role: 'Node' } } as InstanceGroup];
  const nodeOf = (id: string): NodeInfo => ({
    name: id,
    providerID: `aws:///us-east-1a/${id}`,
    labels: { 'topology.kubernetes.io/zone': 'us-east-1a' },
    readyStatus: 'True',
    networkUnavailable: false,
  });

  before(async () => {
    sim = await startAwsSimulator();
    sim.autoscaling.addAutoScalingGroup({
      name: `nodes.${warmCluster}`,
      cluster: warmCluster,
      instanceGroup: 'nodes',
      zones: ['us-east-1a'],
      desiredCapacity: 4,
      members: [
        'i-a',
        'i-b',
        { instanceId: 'i-leaving', lifecycleState: 'Terminating' },
        { instanceId: 'i-hook', lifecycleState: 'Terminating:Wait' },
      ],
      warmPool: { instances: ['i-w1', 'i-w2'] },
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

  it('counts the warm pool towards the target, expects no Node of it, and still expects the Terminating:Wait one', async () => {
    const cloudGroups = await new AwsCloudGroups({ autoscaling: clients.autoscaling }).list(warmCluster);
    const input = { instanceGroups, cloudGroups, nodes: [nodeOf('i-a'), nodeOf('i-b')], pods: [] };
    const result = validateCluster(input);
    assert.deepEqual(
      result.failures.map((f) => [f.reason, f.name]),
      [['machine-not-joined', 'i-hook']],
      'five members (two InService, one held by a hook, two warm) for a target of four: no group-too-small',
    );
    const gauges = validationGaugesOf(result, []);
    assert.deepEqual([gauges.kops_node_ready, gauges.kops_node_notReady], [2, 1]);

    const joined = validateCluster({ ...input, nodes: [...input.nodes, nodeOf('i-hook')] });
    assert.deepEqual(joined.failures, []);
    const withHook = validationGaugesOf(joined, []);
    assert.deepEqual(
      [withHook.kops_node_ready, withHook.kops_node_notReady],
      [3, 0],
      'the warm pool is never notReady',
    );
  });
});

// kops lists as members only the instances EC2 reports pending, running, stopping or stopped with the
// cluster's and the group's tags (upup/pkg/fi/cloudup/awsup/aws_cloud.go findInstances and
// buildCloudInstance), and a stopped instance outside a warm pool is a member like any other: its
// validation (pkg/validation/validate_cluster.go validateNodes) expects it to have a Node.
describe('members as kops reads them from EC2', () => {
  const ec2Cluster = 'ec2.example.com';
  let sim: AwsSimulator;
  let clients: AwsClients;
  const id = (n: number) => simInstanceId(500 + n);
  const [running, stopped, gone, leaving, foreign, untagged, warm] = [0, 1, 2, 3, 4, 5, 6].map(
    id,
  ) as string[];

  before(async () => {
    sim = await startAwsSimulator();
    const seed = (instanceId: string, state: Ec2StateName, instanceGroup: string | null = 'nodes') => ({
      id: instanceId,
      zone: 'us-east-1a',
      state,
      ...(instanceGroup ? { cluster: ec2Cluster, instanceGroup } : {}),
    });
    sim.ec2.addInstances([
      seed(running as string, 'running'),
      seed(stopped as string, 'stopped'),
      seed(gone as string, 'terminated'),
      seed(leaving as string, 'shutting-down'),
      seed(foreign as string, 'running', 'other'),
      seed(untagged as string, 'running', null),
      seed(warm as string, 'stopped'),
    ]);
    // The group still says InService for all of them: what it reports lags behind EC2.
    sim.autoscaling.addAutoScalingGroup({
      name: `nodes.${ec2Cluster}`,
      cluster: ec2Cluster,
      instanceGroup: 'nodes',
      members: [running, stopped, gone, leaving, foreign, untagged].map((instanceId) => ({
        instanceId: instanceId as string,
        lifecycleState: 'InService',
      })),
      desiredCapacity: 6,
      warmPool: { instances: [warm as string] },
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

  it('keeps the members EC2 reports pending/running/stopping/stopped with our tags, in one DescribeInstances', async () => {
    sim.calls.reset();
    const [group] = await new AwsCloudGroups({ autoscaling: clients.autoscaling, ec2: clients.ec2 }).list(
      ec2Cluster,
    );
    assert.deepEqual(
      group?.members.map((m) => [m.instanceId, m.state, m.warmPool ?? false]),
      [
        [running, 'running', false],
        [stopped, 'running', false],
        [warm, 'stopped', true],
      ],
      'terminated, shutting-down, other-group and untagged instances are no members',
    );
    assert.equal(sim.calls.count('DescribeInstances'), 1);
    const all = await new AwsCloudGroups({ autoscaling: clients.autoscaling }).list(ec2Cluster);
    assert.equal(all[0]?.members.length, 7, 'without EC2 the group is taken at its word');
  });

  it('a stopped instance outside the warm pool is expected to have joined, as kops expects', async () => {
    const cloudGroups = await new AwsCloudGroups({ autoscaling: clients.autoscaling, ec2: clients.ec2 }).list(
      ec2Cluster,
    );
    const instanceGroups = [
      {
        apiVersion: 'kops.k8s.io/v1alpha2',
        kind: 'InstanceGroup',
        metadata: { name: 'nodes' },
        spec: { role: 'Node' },
      },
    ] as InstanceGroup[];
    const node: NodeInfo = {
      name: running as string,
      providerID: `aws:///us-east-1a/${running}`,
      labels: {},
      readyStatus: 'True',
      networkUnavailable: false,
    };
    const result = validateCluster({ instanceGroups, cloudGroups, nodes: [node], pods: [] });
    assert.deepEqual(
      result.failures.map((f) => [f.reason, f.name]),
      [
        ['group-too-small', 'nodes'],
        ['machine-not-joined', stopped],
      ],
    );
  });

  it('an EC2 outage fails the listing rather than dropping every member', async () => {
    const strict = await createAwsClients({
      region: sim.region,
      endpoint: sim.endpoint,
      credentials: sim.credentials,
      maxAttempts: 1,
    });
    sim.faults.add({ service: 'ec2', count: 1, error: { code: 'ServiceUnavailable', status: 503 } });
    try {
      await assert.rejects(
        new AwsCloudGroups({ autoscaling: strict.autoscaling, ec2: strict.ec2 }).list(ec2Cluster),
        (err: Error) => err instanceof UnavailableError && /DescribeInstances/.test(err.message),
      );
    } finally {
      sim.faults.reset();
      strict.destroy();
    }
  });
});

describe('what a group and its instances launch from (kops findAutoscalingGroupLaunchConfiguration)', () => {
  it('a launch configuration by name; a launch template by id and version, from the group or its mixed policy', () => {
    assert.deepEqual(launchSpecOf({ LaunchConfigurationName: 'nodes-lc-2' } as AutoScalingGroup), {
      template: 'nodes-lc-2',
    });
    assert.deepEqual(
      launchSpecOf({ LaunchTemplate: { LaunchTemplateId: 'lt-1', Version: '7' } } as AutoScalingGroup),
      { template: 'lt-1:7' },
    );
    assert.deepEqual(
      launchSpecOf({
        MixedInstancesPolicy: {
          LaunchTemplate: { LaunchTemplateSpecification: { LaunchTemplateId: 'lt-2', Version: '$Latest' } },
        },
      } as AutoScalingGroup),
      { launchTemplateId: 'lt-2', version: '$Latest' },
      'kops writes $Latest; the number it stands for is read from EC2',
    );
    assert.equal(launchSpecOf({} as AutoScalingGroup), undefined);
  });

  it("an instance's launch configuration, else its template id and version; else nothing", () => {
    assert.equal(launchedFrom({ LaunchConfigurationName: 'nodes-lc-1' } as AsgInstance), 'nodes-lc-1');
    assert.equal(
      launchedFrom({ LaunchTemplate: { LaunchTemplateId: 'lt-1', Version: '6' } } as AsgInstance),
      'lt-1:6',
    );
    assert.equal(launchedFrom({} as AsgInstance), undefined);
  });
});

// kops' rolling update replaces a member launched from anything but what its group launches now:
// its launch configuration, else `<template id>:<version number>`, `$Latest`/`$Default` resolved with
// ec2:DescribeLaunchTemplates (upup/pkg/fi/cloudup/awsup/aws_cloud.go
// findAutoscalingGroupLaunchConfiguration, findInstanceLaunchConfiguration).
describe('what groups and members launch from, read through the SDK as kops reads it', () => {
  const ltCluster = 'lt.example.com';
  const [nodesLt, spotLt] = [1, 2].map(simLaunchTemplateId) as [string, string];
  let sim: AwsSimulator;
  const igOf = (name: string) =>
    ({
      apiVersion: 'kops.k8s.io/v1alpha2',
      kind: 'InstanceGroup',
      metadata: { name },
      spec: { role: 'Node' },
    }) as InstanceGroup;
  const instanceGroups = ['legacy', 'nodes', 'pinned', 'spot'].map(igOf);
  const ids = (instanceGroup: string, count: number, firstId: number) => {
    const instances = clusterInstances({ cluster: ltCluster, instanceGroup, count, firstId });
    sim.ec2.addInstances(instances);
    return instances.map((i) => i.id);
  };
  const fromTemplate = (id: string, version: string) => ({ launchTemplate: { id, version } });

  before(async () => {
    sim = await startAwsSimulator();
    sim.ec2.addLaunchTemplate({ id: nodesLt, name: `nodes.${ltCluster}`, latestVersion: 3 });
    sim.ec2.addLaunchTemplate({ id: spotLt, name: `spot.${ltCluster}`, latestVersion: 5, defaultVersion: 4 });
    const group = (
      instanceGroup: string,
      launch: SimGroupLaunch,
      members: SimAutoScalingGroupInput['members'],
    ) =>
      sim.autoscaling.addAutoScalingGroup({
        name: `${instanceGroup}.${ltCluster}`,
        cluster: ltCluster,
        instanceGroup,
        launch,
        members,
      });
    const [n1, n2, n3] = ids('nodes', 3, 1) as [string, string, string];
    group('nodes', fromTemplate(nodesLt, '$Latest'), [
      n1,
      { instanceId: n2, launchedFrom: fromTemplate(nodesLt, '2') },
      { instanceId: n3, launchedFrom: fromTemplate(nodesLt, '1') },
    ]);
    // A mixed-instances policy on `$Default` (4): the member of the newer, not default, 5 is replaced too.
    const [s1, s2] = ids('spot', 2, 10) as [string, string];
    group('spot', { mixedInstancesPolicy: { launchTemplate: { id: spotLt, version: '$Default' } } }, [
      s1,
      { instanceId: s2, launchedFrom: fromTemplate(spotLt, '5') },
    ]);
    const [l1, l2] = ids('legacy', 2, 20) as [string, string];
    group('legacy', { launchConfigurationName: 'legacy-lc-2' }, [
      l1,
      { instanceId: l2, launchedFrom: { launchConfigurationName: 'legacy-lc-1' } },
    ]);
    // Pinned back to version 2 of the nodes' template: its member of version 3 is out of date.
    const [p1] = ids('pinned', 1, 30) as [string];
    group('pinned', fromTemplate(nodesLt, '2'), [
      { instanceId: p1, launchedFrom: fromTemplate(nodesLt, '3') },
    ]);
  });
  after(async () => {
    await sim.close();
  });

  async function listAs(credentials: SigV4Credentials, logger?: Logger) {
    const clients = await createAwsClients({
      region: sim.region,
      endpoint: sim.endpoint,
      credentials,
      maxAttempts: 1,
    });
    try {
      const lister = new AwsCloudGroups({
        autoscaling: clients.autoscaling,
        ec2: clients.ec2,
        ...(logger ? { logger } : {}),
      });
      // Twice, as the metrics' refresh lists them every minute.
      await lister.list(ltCluster);
      return await lister.list(ltCluster);
    } finally {
      clients.destroy();
    }
  }
  const needingUpdate = (cloudGroups: CloudGroup[]) =>
    Object.fromEntries(
      instanceGroupHealth({ instanceGroups, cloudGroups, nodes: [] }).map((g) => [
        g.instanceGroup,
        g.needingUpdate,
      ]),
    );

  it('resolves $Latest and $Default with one DescribeLaunchTemplates call and counts the members launched from older ones', async () => {
    sim.calls.reset();
    const groups = await listAs(sim.credentials);
    assert.equal(sim.calls.count('DescribeLaunchTemplates'), 2, 'one call per listing, for both templates');
    assert.deepEqual(
      groups.map((g) => [g.instanceGroup, g.template]),
      [
        ['legacy', 'legacy-lc-2'],
        ['nodes', `${nodesLt}:3`],
        ['pinned', `${nodesLt}:2`],
        ['spot', `${spotLt}:4`],
      ],
    );
    assert.deepEqual(
      groups.find((g) => g.instanceGroup === 'nodes')?.members.map((m) => m.template),
      [`${nodesLt}:3`, `${nodesLt}:2`, `${nodesLt}:1`],
      'each member as DescribeAutoScalingGroups names it',
    );
    assert.deepEqual(needingUpdate(groups), { legacy: 1, nodes: 2, pinned: 1, spot: 1 });
  });

  it('a role without ec2:DescribeLaunchTemplates: no count for groups on $Latest/$Default, one warning', async () => {
    const role = sim.sts.addUser('kops-control-plane', { deniedActions: ['ec2:DescribeLaunchTemplates'] });
    const lines: string[] = [];
    const logger = createLogger({
      level: 'warn',
      destination: { write: (line: string) => lines.push(line) },
    });
    const groups = await listAs(role, logger);
    assert.deepEqual(
      needingUpdate(groups),
      { legacy: 1, nodes: undefined, pinned: 1, spot: undefined },
      'groups naming a version number or a launch configuration are still judged',
    );
    assert.equal(lines.length, 1, 'one warning over two listings');
    const record = JSON.parse(lines[0] ?? '{}') as { level: string; msg: string; err: string };
    assert.equal(record.level, 'warn');
    assert.match(record.msg, /^launch template versions are not known/);
    assert.match(record.err, /UnauthorizedOperation.*grant ec2:DescribeLaunchTemplates/);
  });
});

describe('a group being deleted (AutoScalingGroup.Status)', () => {
  it('is left out, as kops leaves it out: AWS lists it with Status "Delete in progress" until it is gone', async () => {
    // client-auto-scaling models AutoScalingGroup.Status: "The current state of the Auto Scaling group
    // when the DeleteAutoScalingGroup operation is in progress"; kops skips every group that has one
    // (upup/pkg/fi/cloudup/awsup/aws_cloud.go FindAutoscalingGroups: `if asg.Status != nil`).
    const sim = await startAwsSimulator({ throttling: false });
    const clients = await createAwsClients({
      region: sim.region,
      endpoint: sim.endpoint,
      credentials: sim.credentials,
    });
    try {
      sim.ec2.addInstances(clusterInstances({ cluster, instanceGroup: 'nodes', count: 2 }));
      sim.autoscaling.addAutoScalingGroup({
        name: `nodes.${cluster}`,
        cluster,
        instanceGroup: 'nodes',
        members: [simInstanceId(1)],
      });
      sim.autoscaling.addAutoScalingGroup({
        name: `old-nodes.${cluster}`,
        cluster,
        instanceGroup: 'old-nodes',
        desiredCapacity: 3,
        members: [simInstanceId(2)],
        status: 'Delete in progress',
      });
      const groups = await new AwsCloudGroups({ autoscaling: clients.autoscaling, ec2: clients.ec2 }).list(
        cluster,
      );
      assert.deepEqual(
        groups.map((g) => g.cloudName),
        [`nodes.${cluster}`],
      );
      assert.equal(sim.calls.count('DescribeWarmPool'), 1, 'no warm pool read for the group being deleted');
    } finally {
      clients.destroy();
      await sim.close();
    }
  });
});
