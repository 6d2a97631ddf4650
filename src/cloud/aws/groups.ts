/**
 * A cluster's cloud groups on AWS: its Auto Scaling groups (found by the cluster ownership tag), each
 * with the kops instance group it backs, its sizes and its members' lifecycle and health — what
 * `validate` and the metrics compare against the Nodes.
 */
import {
  type Instance as AsgInstance,
  type AutoScalingClient,
  type AutoScalingGroup,
  paginateDescribeAutoScalingGroups,
  paginateDescribeWarmPool,
} from '@aws-sdk/client-auto-scaling';
import { ConfigError } from '../../errors.ts';
import { type Logger, silentLogger } from '../../log.ts';
import { mapConcurrent } from '../concurrency.ts';
import type { CloudGroup, CloudGroupMember, CloudGroups, InstanceState } from '../types.ts';
import { awsCallError } from './errors.ts';
import { clusterTagKey, instanceGroupTag, ownedByCluster } from './instance.ts';
import { formatAwsProviderID } from './providerid.ts';

/** `DescribeWarmPool` calls in flight at once: one per group, as kops makes them, but bounded. */
const warmPoolConcurrency = 4;

/** What the lister needs. */
export interface AwsCloudGroupsOptions {
  autoscaling: AutoScalingClient;
  logger?: Logger;
}

/**
 * The instance state an Auto Scaling lifecycle state amounts to. `Warmed:*` states are those of
 * warm-pool instances, whose own state follows the colon (`Warmed:Running`, `Warmed:Stopped`…).
 */
export function stateOfLifecycle(lifecycleState: string | undefined): InstanceState {
  const state = (lifecycleState ?? '').replace(/^Warmed:/, '');
  if (state === 'Stopped' || state === 'Hibernated') return 'stopped';
  if (state.startsWith('Pending')) return 'pending';
  if (state === 'Terminated') return 'terminated';
  if (state.startsWith('Terminating')) return 'stopping';
  if (
    state === 'InService' ||
    state === 'Running' ||
    state.includes('Standby') ||
    state.startsWith('Detach')
  ) {
    return 'running';
  }
  return 'unknown';
}

/**
 * Whether kops lists an instance as a member: it ignores one whose lifecycle state is exactly
 * `Terminating` but keeps `Terminating:Wait` and `Terminating:Proceed` (held by a lifecycle hook) as
 * ordinary members, counted and expected to have joined (upup/pkg/fi/cloudup/awsup/aws_cloud.go
 * buildCloudInstance).
 */
function listedByKops(instance: AsgInstance): boolean {
  return instance.LifecycleState !== 'Terminating';
}

function memberOf(instance: AsgInstance): CloudGroupMember {
  const instanceId = instance.InstanceId ?? '';
  const member: CloudGroupMember = {
    instanceId,
    providerID: formatAwsProviderID(instance.AvailabilityZone ?? '', instanceId),
    state: stateOfLifecycle(instance.LifecycleState),
    healthy: instance.HealthStatus === 'Healthy' && instance.LifecycleState === 'InService',
  };
  // kops marks every `Warmed*` instance WarmPool (aws_cloud.go buildCloudInstance).
  if (instance.LifecycleState?.startsWith('Warmed')) member.warmPool = true;
  return member;
}

function tagsOf(group: AutoScalingGroup): Record<string, string> {
  const tags: Record<string, string> = {};
  for (const tag of group.Tags ?? []) if (tag.Key !== undefined) tags[tag.Key] = tag.Value ?? '';
  return tags;
}

/** Lists a cluster's Auto Scaling groups. */
export class AwsCloudGroups implements CloudGroups {
  readonly #autoscaling: AutoScalingClient;
  readonly #logger: Logger;
  #warnedWarmPoolDenied = false;

  constructor(options: AwsCloudGroupsOptions) {
    this.#autoscaling = options.autoscaling;
    this.#logger = options.logger ?? silentLogger;
  }

  /**
   * The cluster's groups that back a kops instance group, sorted by instance group; each with its
   * members and, as kops lists them, its warm pool's instances.
   */
  async list(clusterName: string): Promise<CloudGroup[]> {
    const groups: CloudGroup[] = [];
    try {
      const pages = paginateDescribeAutoScalingGroups(
        { client: this.#autoscaling, pageSize: 100 },
        { Filters: [{ Name: 'tag-key', Values: [clusterTagKey(clusterName)] }] },
      );
      for await (const page of pages) {
        for (const group of page.AutoScalingGroups ?? []) {
          const tags = tagsOf(group);
          const instanceGroup = tags[instanceGroupTag];
          if (!ownedByCluster(tags, clusterName) || !instanceGroup) {
            this.#logger.debug(
              { asg: group.AutoScalingGroupName },
              'skipping an Auto Scaling group of no kops instance group',
            );
            continue;
          }
          groups.push({
            instanceGroup,
            cloudName: group.AutoScalingGroupName ?? '',
            minSize: group.MinSize ?? 0,
            maxSize: group.MaxSize ?? 0,
            targetSize: group.DesiredCapacity ?? 0,
            members: (group.Instances ?? []).filter(listedByKops).map(memberOf),
          });
        }
      }
    } catch (err) {
      throw awsCallError(
        err,
        'autoscaling:DescribeAutoScalingGroups',
        'autoscaling:DescribeAutoScalingGroups',
      );
    }
    await mapConcurrent(groups, warmPoolConcurrency, async (group) => {
      group.members.push(...(await this.#warmPool(group.cloudName)));
    });
    return groups.sort(
      (a, b) => a.instanceGroup.localeCompare(b.instanceGroup) || a.cloudName.localeCompare(b.cloudName),
    );
  }

  /**
   * The instances of a group's warm pool (none when it has no warm pool). kops' control-plane role
   * lacks `autoscaling:DescribeWarmPool` (pkg/model/iam/iam_builder.go), so a denial lists no warm
   * pool, with one warning: leaving members out can only fail a group as too small, never pass it.
   * Throttling and outages still fail the listing.
   */
  async #warmPool(asgName: string): Promise<CloudGroupMember[]> {
    const members: CloudGroupMember[] = [];
    try {
      const pages = paginateDescribeWarmPool(
        { client: this.#autoscaling, pageSize: 50 },
        { AutoScalingGroupName: asgName },
      );
      for await (const page of pages) {
        members.push(...(page.Instances ?? []).filter(listedByKops).map(memberOf));
      }
    } catch (err) {
      const error = awsCallError(err, 'autoscaling:DescribeWarmPool', 'autoscaling:DescribeWarmPool');
      if (!(error instanceof ConfigError)) throw error;
      if (!this.#warnedWarmPoolDenied) {
        this.#warnedWarmPoolDenied = true;
        this.#logger.warn(
          { asg: asgName, err: error.message },
          'warm pools are not listed: their instances do not count towards the target sizes',
        );
      }
      return [];
    }
    return members;
  }
}
