/**
 * The simulated Auto Scaling `DescribeAutoScalingGroups` and `DescribeWarmPool` (awsQuery protocol):
 * group names, tag filters, `MaxRecords`/`NextToken` paging, and groups with what they launch from,
 * their members (each with what it was launched from) and warm pools as AWS returns them.
 */
import { randomUUID } from 'node:crypto';
import { pageOf } from './paging.ts';
import { AwsSimError, filterParams, listParam, type QueryFilter, tagFilterMatches } from './query.ts';
import type {
  AwsWorld,
  SimAsgMember,
  SimAutoScalingGroup,
  SimGroupLaunch,
  SimLaunchSource,
  SimLaunchTemplateRef,
} from './world.ts';
import { document, el, list, wrap } from './xml.ts';

/** The XML namespace of the Auto Scaling API. */
export const autoScalingNamespace = 'http://autoscaling.amazonaws.com/doc/2011-01-01/';

function filterMatches(filter: QueryFilter, group: SimAutoScalingGroup): boolean {
  const byTag = tagFilterMatches(filter, group.tags);
  if (byTag === undefined) {
    throw new AwsSimError('ValidationError', `Filter name '${filter.name}' is not supported`);
  }
  return byTag;
}

/** A `LaunchTemplateSpecification`: the id, the template's name when it exists, and the version as named. */
function renderTemplateRef(world: AwsWorld, ref: SimLaunchTemplateRef): string {
  return (
    el('LaunchTemplateId', ref.id) +
    el('LaunchTemplateName', world.launchTemplate(ref.id)?.name) +
    el('Version', ref.version)
  );
}

/** A member's or a group's `LaunchConfigurationName` or `LaunchTemplate`. */
function renderLaunchSource(world: AwsWorld, source: SimLaunchSource | undefined): string {
  if (!source) return '';
  if ('launchConfigurationName' in source)
    return el('LaunchConfigurationName', source.launchConfigurationName);
  return wrap('LaunchTemplate', renderTemplateRef(world, source.launchTemplate));
}

/** What a group launches from; a mixed-instances policy carries its template and instance-type overrides. */
function renderGroupLaunch(world: AwsWorld, launch: SimGroupLaunch | undefined): string {
  if (!launch || !('mixedInstancesPolicy' in launch)) return renderLaunchSource(world, launch);
  const { launchTemplate, instanceTypes = [] } = launch.mixedInstancesPolicy;
  return wrap(
    'MixedInstancesPolicy',
    wrap(
      'LaunchTemplate',
      wrap('LaunchTemplateSpecification', renderTemplateRef(world, launchTemplate)) +
        list('Overrides', 'member', instanceTypes, (type) => el('InstanceType', type)),
    ) +
      wrap(
        'InstancesDistribution',
        el('OnDemandAllocationStrategy', 'prioritized') +
          el('OnDemandBaseCapacity', 0) +
          el('OnDemandPercentageAboveBaseCapacity', 0) +
          el('SpotAllocationStrategy', 'capacity-optimized'),
      ),
  );
}

function renderInstance(world: AwsWorld, m: SimAsgMember): string {
  return (
    el('InstanceId', m.instanceId) +
    el('InstanceType', 't3.medium') +
    el('AvailabilityZone', m.zone) +
    el('LifecycleState', m.lifecycleState) +
    el('HealthStatus', m.healthStatus) +
    renderLaunchSource(world, m.launchedFrom) +
    el('ProtectedFromScaleIn', false)
  );
}

function renderGroup(world: AwsWorld, g: SimAutoScalingGroup): string {
  const arn = `arn:aws:autoscaling:${world.region}:${world.account}:autoScalingGroup:${randomUUID()}:autoScalingGroupName/${g.name}`;
  return (
    el('AutoScalingGroupName', g.name) +
    el('AutoScalingGroupARN', arn) +
    renderGroupLaunch(world, g.launch) +
    el('MinSize', g.minSize) +
    el('MaxSize', g.maxSize) +
    el('DesiredCapacity', g.desiredCapacity) +
    el('DefaultCooldown', 300) +
    list('AvailabilityZones', 'member', g.zones, (z) => z) +
    '<LoadBalancerNames/>' +
    '<TargetGroupARNs/>' +
    el('HealthCheckType', 'EC2') +
    el('HealthCheckGracePeriod', 0) +
    list('Instances', 'member', g.members, (m) => renderInstance(world, m)) +
    el('CreatedTime', g.createdTime.toISOString()) +
    '<SuspendedProcesses/>' +
    // Only while DeleteAutoScalingGroup runs (client-auto-scaling AutoScalingGroup.Status).
    el('Status', g.status) +
    '<EnabledMetrics/>' +
    list(
      'Tags',
      'member',
      Object.entries(g.tags),
      ([k, v]) =>
        el('ResourceId', g.name) +
        el('ResourceType', 'auto-scaling-group') +
        el('Key', k) +
        el('Value', v) +
        el('PropagateAtLaunch', true),
    ) +
    '<TerminationPolicies><member>Default</member></TerminationPolicies>' +
    el('NewInstancesProtectedFromScaleIn', false) +
    el(
      'ServiceLinkedRoleARN',
      `arn:aws:iam::${world.account}:role/aws-service-role/autoscaling.amazonaws.com/AWSServiceRoleForAutoScaling`,
    )
  );
}

/** Handles `DescribeAutoScalingGroups`; returns the response document. */
export function describeAutoScalingGroups(world: AwsWorld, params: ReadonlyMap<string, string>): string {
  const names = new Set(listParam(params, 'AutoScalingGroupNames.member'));
  const filters = filterParams(params, 'query');
  const matching = world
    .autoScalingGroups()
    .filter((g) => names.size === 0 || names.has(g.name))
    .filter((g) => filters.every((f) => filterMatches(f, g)));
  const { page, nextToken } = pageOf(matching, params, {
    param: 'MaxRecords',
    min: 1,
    max: 100,
    default: 50,
  });
  return document(
    'DescribeAutoScalingGroupsResponse',
    autoScalingNamespace,
    wrap(
      'DescribeAutoScalingGroupsResult',
      list('AutoScalingGroups', 'member', page, (g) => renderGroup(world, g)) + el('NextToken', nextToken),
    ) + wrap('ResponseMetadata', el('RequestId', randomUUID())),
  );
}

/**
 * Handles `DescribeWarmPool`; returns the response document. A group without a warm pool answers with
 * no configuration and no instances, as AWS does; pages hold at most 50 instances (AWS' maximum).
 */
export function describeWarmPool(world: AwsWorld, params: ReadonlyMap<string, string>): string {
  const name = params.get('AutoScalingGroupName');
  if (!name) {
    throw new AwsSimError(
      'ValidationError',
      "1 validation error detected: Value null at 'autoScalingGroupName' failed to satisfy constraint: Member must not be null",
    );
  }
  const group = world.autoScalingGroup(name);
  if (!group) throw new AwsSimError('ValidationError', `AutoScalingGroup name not found - ${name}`);
  const pool = group.warmPool;
  const { page, nextToken } = pageOf(pool?.instances ?? [], params, {
    param: 'MaxRecords',
    min: 1,
    max: 50,
    default: 50,
  });
  const configuration =
    pool &&
    wrap(
      'WarmPoolConfiguration',
      el('MinSize', pool.minSize) +
        el('PoolState', pool.poolState) +
        wrap('InstanceReusePolicy', el('ReuseOnScaleIn', false)),
    );
  return document(
    'DescribeWarmPoolResponse',
    autoScalingNamespace,
    wrap(
      'DescribeWarmPoolResult',
      (configuration ?? '') +
        list('Instances', 'member', page, (m) => renderInstance(world, m)) +
        el('NextToken', nextToken),
    ) + wrap('ResponseMetadata', el('RequestId', randomUUID())),
  );
}
