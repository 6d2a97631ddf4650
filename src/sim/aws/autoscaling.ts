/**
 * The simulated Auto Scaling `DescribeAutoScalingGroups` and `DescribeWarmPool` (awsQuery protocol):
 * group names, tag filters, `MaxRecords`/`NextToken` paging, and groups with their members and warm
 * pools as AWS returns them.
 */
import { randomUUID } from 'node:crypto';
import {
  AwsSimError,
  filterParams,
  intParam,
  listParam,
  pageToken,
  type QueryFilter,
  tagFilterMatches,
} from './query.ts';
import type { AwsWorld, SimAsgMember, SimAutoScalingGroup } from './world.ts';
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

function renderInstance(m: SimAsgMember): string {
  return (
    el('InstanceId', m.instanceId) +
    el('InstanceType', 't3.medium') +
    el('AvailabilityZone', m.zone) +
    el('LifecycleState', m.lifecycleState) +
    el('HealthStatus', m.healthStatus) +
    el('ProtectedFromScaleIn', false)
  );
}

function renderGroup(world: AwsWorld, g: SimAutoScalingGroup): string {
  const arn = `arn:aws:autoscaling:${world.region}:${world.account}:autoScalingGroup:${randomUUID()}:autoScalingGroupName/${g.name}`;
  return (
    el('AutoScalingGroupName', g.name) +
    el('AutoScalingGroupARN', arn) +
    el('MinSize', g.minSize) +
    el('MaxSize', g.maxSize) +
    el('DesiredCapacity', g.desiredCapacity) +
    el('DefaultCooldown', 300) +
    list('AvailabilityZones', 'member', g.zones, (z) => z) +
    '<LoadBalancerNames/>' +
    '<TargetGroupARNs/>' +
    el('HealthCheckType', 'EC2') +
    el('HealthCheckGracePeriod', 0) +
    list('Instances', 'member', g.members, renderInstance) +
    el('CreatedTime', g.createdTime.toISOString()) +
    '<SuspendedProcesses/>' +
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
  const maxRecords = intParam(params, 'MaxRecords', { min: 1, max: 100, default: 50 });
  const offset = pageToken.decode(params.get('NextToken'));
  const page = matching.slice(offset, offset + maxRecords);
  const next = offset + page.length < matching.length ? pageToken.encode(offset + page.length) : undefined;
  return document(
    'DescribeAutoScalingGroupsResponse',
    autoScalingNamespace,
    wrap(
      'DescribeAutoScalingGroupsResult',
      list('AutoScalingGroups', 'member', page, (g) => renderGroup(world, g)) + el('NextToken', next),
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
  const maxRecords = intParam(params, 'MaxRecords', { min: 1, max: 50, default: 50 });
  const offset = pageToken.decode(params.get('NextToken'));
  const instances = pool?.instances ?? [];
  const page = instances.slice(offset, offset + maxRecords);
  const next = offset + page.length < instances.length ? pageToken.encode(offset + page.length) : undefined;
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
      (configuration ?? '') + list('Instances', 'member', page, renderInstance) + el('NextToken', next),
    ) + wrap('ResponseMetadata', el('RequestId', randomUUID())),
  );
}
