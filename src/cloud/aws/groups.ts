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
} from '@aws-sdk/client-auto-scaling';
import { type Logger, silentLogger } from '../../log.ts';
import type { CloudGroup, CloudGroupMember, CloudGroups, InstanceState } from '../types.ts';
import { awsCallError } from './errors.ts';
import { clusterTagKey, instanceGroupTag, ownedByCluster } from './instance.ts';
import { formatAwsProviderID } from './providerid.ts';

/** What the lister needs. */
export interface AwsCloudGroupsOptions {
  autoscaling: AutoScalingClient;
  logger?: Logger;
}

/** The instance state an Auto Scaling lifecycle state amounts to. */
export function stateOfLifecycle(lifecycleState: string | undefined): InstanceState {
  const state = lifecycleState ?? '';
  if (state.startsWith('Warmed:')) return 'stopped';
  if (state.startsWith('Pending')) return 'pending';
  if (state === 'Terminated') return 'terminated';
  if (state.startsWith('Terminating')) return 'stopping';
  if (state === 'InService' || state.includes('Standby') || state.startsWith('Detach')) return 'running';
  return 'unknown';
}

function memberOf(instance: AsgInstance): CloudGroupMember {
  const instanceId = instance.InstanceId ?? '';
  return {
    instanceId,
    providerID: formatAwsProviderID(instance.AvailabilityZone ?? '', instanceId),
    state: stateOfLifecycle(instance.LifecycleState),
    healthy: instance.HealthStatus === 'Healthy' && instance.LifecycleState === 'InService',
  };
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

  constructor(options: AwsCloudGroupsOptions) {
    this.#autoscaling = options.autoscaling;
    this.#logger = options.logger ?? silentLogger;
  }

  /** The cluster's groups that back a kops instance group, sorted by instance group. */
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
            members: (group.Instances ?? []).map(memberOf),
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
    return groups.sort(
      (a, b) => a.instanceGroup.localeCompare(b.instanceGroup) || a.cloudName.localeCompare(b.cloudName),
    );
  }
}
