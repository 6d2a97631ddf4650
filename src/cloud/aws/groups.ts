/**
 * A cluster's cloud groups on AWS: its Auto Scaling groups (found by the cluster ownership tag), each
 * with the kops instance group it backs, its sizes, what it launches from, and its members' lifecycle,
 * health and launch template version — what `validate` and the metrics compare against the Nodes.
 */
import {
  type Instance as AsgInstance,
  type AutoScalingClient,
  type AutoScalingGroup,
  type LaunchTemplateSpecification,
  paginateDescribeAutoScalingGroups,
  paginateDescribeWarmPool,
} from '@aws-sdk/client-auto-scaling';
import {
  DescribeLaunchTemplatesCommand,
  type EC2Client,
  paginateDescribeInstances,
} from '@aws-sdk/client-ec2';
import { ConfigError, UnavailableError } from '../../errors.ts';
import { type Logger, silentLogger } from '../../log.ts';
import { mapConcurrent } from '../concurrency.ts';
import type { CloudGroup, CloudGroupMember, CloudGroups, InstanceState } from '../types.ts';
import { awsCallError } from './errors.ts';
import {
  clusterTagKey,
  instanceGroupTag,
  tagsOf as instanceTagsOf,
  legacyClusterTag,
  ownedByCluster,
} from './instance.ts';
import { formatAwsProviderID } from './providerid.ts';

/** `DescribeWarmPool` calls in flight at once: one per group, as kops makes them, but bounded. */
const warmPoolConcurrency = 4;
/** The most launch template ids one DescribeLaunchTemplates call takes. */
const launchTemplatesPerCall = 200;

/** What the lister needs. */
export interface AwsCloudGroupsOptions {
  autoscaling: AutoScalingClient;
  /**
   * For what kops reads from EC2 besides the groups: the instances' states (members whose instance is
   * not pending, running, stopping or stopped are left out) and the version numbers `$Latest` and
   * `$Default` stand for. Without it every member is listed and a group launching `$Latest` has no
   * known template.
   */
  ec2?: EC2Client;
  logger?: Logger;
}

/** The EC2 states of the instances kops lists as members (awsup findInstances). */
const memberEc2States = ['pending', 'running', 'stopping', 'stopped'];

/** What a group launches from, before `$Latest`/`$Default` are resolved. */
type LaunchSpec = { template: string } | { launchTemplateId: string; version: string };

/**
 * What a group launches new instances from, as kops reads it (awsup
 * findAutoscalingGroupLaunchConfiguration): its launch configuration, else its launch template, else
 * its mixed-instances policy's template; undefined when it names none.
 */
export function launchSpecOf(group: AutoScalingGroup): LaunchSpec | undefined {
  if (group.LaunchConfigurationName) return { template: group.LaunchConfigurationName };
  const spec: LaunchTemplateSpecification | undefined =
    group.LaunchTemplate ?? group.MixedInstancesPolicy?.LaunchTemplate?.LaunchTemplateSpecification;
  if (!spec?.LaunchTemplateId) return undefined;
  const version = spec.Version ?? '';
  return /^\d+$/.test(version)
    ? { template: `${spec.LaunchTemplateId}:${version}` }
    : { launchTemplateId: spec.LaunchTemplateId, version };
}

/**
 * What an instance was launched from, in the same form (awsup findInstanceLaunchConfiguration): its
 * launch configuration, else `<launch template id>:<version>`; undefined when it names neither.
 */
export function launchedFrom(instance: AsgInstance): string | undefined {
  if (instance.LaunchConfigurationName) return instance.LaunchConfigurationName;
  const id = instance.LaunchTemplate?.LaunchTemplateId;
  return id ? `${id}:${instance.LaunchTemplate?.Version ?? ''}` : undefined;
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
  const template = launchedFrom(instance);
  if (template !== undefined) member.template = template;
  // kops marks every `Warmed*` instance WarmPool (aws_cloud.go buildCloudInstance).
  if (instance.LifecycleState?.startsWith('Warmed')) member.warmPool = true;
  return member;
}

function tagsOf(group: AutoScalingGroup): Record<string, string> {
  const tags: Record<string, string> = {};
  for (const tag of group.Tags ?? []) if (tag.Key !== undefined) tags[tag.Key] = tag.Value ?? '';
  return tags;
}

/** The most pages one listing follows: far more than any cluster's groups or instances fill. */
const maxListingPages = 10_000;

/**
 * The pages of an SDK paginator, refusing a NextToken answered a second time or more pages than
 * {@link maxListingPages}: the SDK's paginators follow such a token for ever (its `stopOnSameToken`
 * would end the listing quietly, as if complete, which is worse: a group would look empty).
 */
async function* distinctPages<P extends { NextToken?: string | undefined }>(
  pages: AsyncIterable<P>,
  operation: string,
): AsyncGenerator<P> {
  const tokens = new Set<string>();
  for await (const page of pages) {
    yield page;
    const token = page.NextToken;
    if (!token) continue;
    if (tokens.has(token) || tokens.size >= maxListingPages) {
      throw new UnavailableError(
        `${operation} answered ${tokens.has(token) ? 'a NextToken it had already answered' : `more than ${maxListingPages} pages`}; the listing is abandoned and retried`,
        { details: { reason: 'malformed-answer' } },
      );
    }
    tokens.add(token);
  }
}

/** Lists a cluster's Auto Scaling groups. */
export class AwsCloudGroups implements CloudGroups {
  readonly #autoscaling: AutoScalingClient;
  readonly #ec2: EC2Client | undefined;
  readonly #logger: Logger;
  #warnedWarmPoolDenied = false;
  #warnedTemplatesDenied = false;

  constructor(options: AwsCloudGroupsOptions) {
    this.#autoscaling = options.autoscaling;
    this.#ec2 = options.ec2;
    this.#logger = options.logger ?? silentLogger;
  }

  /**
   * The cluster's groups that back a kops instance group, sorted by instance group; each with its
   * members and, as kops lists them, its warm pool's instances.
   */
  async list(clusterName: string): Promise<CloudGroup[]> {
    const found: { group: CloudGroup; launch: LaunchSpec | undefined }[] = [];
    try {
      const pages = distinctPages(
        paginateDescribeAutoScalingGroups(
          { client: this.#autoscaling, pageSize: 100 },
          { Filters: [{ Name: 'tag-key', Values: [clusterTagKey(clusterName)] }] },
        ),
        'autoscaling:DescribeAutoScalingGroups',
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
          // AWS lists a group with Status `Delete in progress` until DeleteAutoScalingGroup is done;
          // kops leaves such a group out (awsup FindAutoscalingGroups), and so does this listing.
          if (group.Status) {
            this.#logger.debug(
              { asg: group.AutoScalingGroupName, status: group.Status },
              'skipping an Auto Scaling group being deleted',
            );
            continue;
          }
          found.push({
            group: {
              instanceGroup,
              cloudName: group.AutoScalingGroupName ?? '',
              minSize: group.MinSize ?? 0,
              maxSize: group.MaxSize ?? 0,
              targetSize: group.DesiredCapacity ?? 0,
              members: (group.Instances ?? []).filter(listedByKops).map(memberOf),
            },
            launch: launchSpecOf(group),
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
    const groups = found.map((f) => f.group);
    await mapConcurrent(groups, warmPoolConcurrency, async (group) => {
      group.members.push(...(await this.#warmPool(group.cloudName)));
    });
    await this.#setTemplates(found);
    await this.#keepListedInstances(clusterName, groups);
    return groups.sort(
      (a, b) => a.instanceGroup.localeCompare(b.instanceGroup) || a.cloudName.localeCompare(b.cloudName),
    );
  }

  /**
   * Sets each group's template, resolving `$Latest` and `$Default` (and no version, which is the
   * default) to version numbers with one DescribeLaunchTemplates call per 200 templates, as kops
   * compares numbers. Only the gauge of instances needing an update reads it, so a failure leaves those
   * groups' template unknown (logged; a denial once: kops' control-plane role lacks
   * ec2:DescribeLaunchTemplates) rather than failing validation.
   */
  async #setTemplates(
    found: readonly { group: CloudGroup; launch: LaunchSpec | undefined }[],
  ): Promise<void> {
    const unresolved = new Set<string>();
    for (const { group, launch } of found) {
      if (launch && 'template' in launch) group.template = launch.template;
      else if (launch) unresolved.add(launch.launchTemplateId);
    }
    if (unresolved.size === 0) return;
    const ec2 = this.#ec2;
    if (!ec2) return;
    const versions = new Map<string, { latest?: number; default?: number }>();
    try {
      const ids = [...unresolved];
      for (let i = 0; i < ids.length; i += launchTemplatesPerCall) {
        const answer = await ec2.send(
          new DescribeLaunchTemplatesCommand({ LaunchTemplateIds: ids.slice(i, i + launchTemplatesPerCall) }),
        );
        for (const t of answer.LaunchTemplates ?? []) {
          if (!t.LaunchTemplateId) continue;
          versions.set(t.LaunchTemplateId, {
            latest: t.LatestVersionNumber,
            default: t.DefaultVersionNumber,
          });
        }
      }
    } catch (err) {
      const error = awsCallError(err, 'ec2:DescribeLaunchTemplates', 'ec2:DescribeLaunchTemplates');
      if (error instanceof ConfigError && this.#warnedTemplatesDenied) return;
      this.#warnedTemplatesDenied ||= error instanceof ConfigError;
      this.#logger.warn(
        { err: error.message },
        'launch template versions are not known: no count of instances needing an update',
      );
      return;
    }
    for (const { group, launch } of found) {
      if (!launch || 'template' in launch) continue;
      const known = versions.get(launch.launchTemplateId);
      const version = launch.version === '$Latest' ? known?.latest : known?.default;
      if (version !== undefined) group.template = `${launch.launchTemplateId}:${version}`;
    }
  }

  /**
   * Leaves out members kops does not list: those whose instance EC2 does not report in state pending,
   * running, stopping or stopped, tagged with the cluster and the member's instance group (awsup
   * findInstances, one paged DescribeInstances for the whole cluster instead of one per group). A
   * member whose instance was terminated behind the group's back is then no machine expected to join.
   */
  async #keepListedInstances(clusterName: string, groups: readonly CloudGroup[]): Promise<void> {
    const ec2 = this.#ec2;
    if (!ec2 || groups.every((g) => g.members.length === 0)) return;
    const groupOf = new Map<string, string>();
    try {
      const pages = distinctPages(
        paginateDescribeInstances(
          { client: ec2, pageSize: 1000 },
          {
            Filters: [
              { Name: 'tag-key', Values: [clusterTagKey(clusterName), legacyClusterTag] },
              { Name: 'instance-state-name', Values: memberEc2States },
            ],
          },
        ),
        'ec2:DescribeInstances',
      );
      for await (const page of pages) {
        for (const instance of (page.Reservations ?? []).flatMap((r) => r.Instances ?? [])) {
          const tags = instanceTagsOf(instance);
          if (instance.InstanceId && ownedByCluster(tags, clusterName)) {
            groupOf.set(instance.InstanceId, tags[instanceGroupTag] ?? '');
          }
        }
      }
    } catch (err) {
      throw awsCallError(err, 'ec2:DescribeInstances', 'ec2:DescribeInstances');
    }
    for (const group of groups) {
      group.members = group.members.filter((m) => groupOf.get(m.instanceId) === group.instanceGroup);
    }
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
      const pages = distinctPages(
        paginateDescribeWarmPool(
          { client: this.#autoscaling, pageSize: 50 },
          { AutoScalingGroupName: asgName },
        ),
        'autoscaling:DescribeWarmPool',
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
