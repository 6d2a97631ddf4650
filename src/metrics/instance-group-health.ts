/**
 * Health per instance group, from the same inputs as the `kops_*` gauges: how many of a group's
 * nodes are Ready (kops' readiness, {@link isReady}), not Ready, or missing against the group's desired
 * size, how many carry labels that differ from what the group's spec asks for, and how many instances
 * `kops rolling-update` would replace. Pure: no I/O, no clock. Split into what the slow inputs give
 * ({@link healthPlan}) and what one node adds ({@link nodeHealth}), so the metrics can keep the counts
 * from watch events without counting every node again.
 */
import type { CloudGroup } from '../cloud/types.ts';
import { buildNodeLabels, instanceGroupLabel } from '../nodelabels/build-node-labels.ts';
import { diffLabels, isEmptyDiff } from '../nodelabels/diff-labels.ts';
import { verifyManagedLabels } from '../nodelabels/signed-managed-labels.ts';
import type { Cluster, InstanceGroup } from '../statestore/kops-types.ts';
import { isReady, type NodeInfo, visibleMembers } from '../validation/validate-cluster.ts';

/** A node as the health counts read it: validation's view plus what the controller and kops annotate. */
export interface LabelledNodeInfo extends NodeInfo {
  /** The Node's UID, to which the controller's signature of its managed set is bound. */
  uid?: string;
  /**
   * The `kops.k8s.io/managed-labels` annotation and its signature as the Node carries them: node-written
   * data, believed only when the signature verifies ({@link HealthPlan.labelsKey}).
   */
  managedLabels?: string;
  managedLabelsSignature?: string;
  /** The node carries kops' `kops.k8s.io/needs-update` annotation (a rolling update is asked for). */
  needsUpdate?: boolean;
}

/** The annotation with which `kops rolling-update` is asked to replace a node whatever its template. */
export const needsUpdateAnnotation = 'kops.k8s.io/needs-update';

/** What the counts are computed from. */
export interface InstanceGroupHealthInput {
  instanceGroups: readonly InstanceGroup[];
  cloudGroups: readonly CloudGroup[];
  nodes: readonly LabelledNodeInfo[];
  /** The cluster spec, for the desired labels; without it drift is not counted. */
  cluster?: Cluster;
  /** The key the NodeController signs managed sets with, when it holds one ({@link HealthPlan.labelsKey}). */
  labelsKey?: Uint8Array;
}

/** The counts of one instance group. */
export interface InstanceGroupHealth {
  instanceGroup: string;
  ready: number;
  notReady: number;
  /**
   * The group's desired size: its cloud group's target size, else the spec's `minSize`; undefined when
   * neither is known (no series then, rather than a desired size of zero that hides missing nodes).
   */
  desired?: number;
  /** Desired minus the nodes present (never below zero); undefined with `desired`. */
  missing?: number;
  /** Nodes whose labels differ from the group's desired labels; undefined without the cluster spec. */
  labelDrift?: number;
  /**
   * Instances `kops rolling-update` would replace ({@link memberNeedsUpdate}); undefined when no cloud
   * group of the instance group says what it launches from.
   */
  needingUpdate?: number;
}

/**
 * Labels a cloud implies for an instance rather than the spec (the AWS spot/on-demand lifecycle label
 * the node controller adds from the instance's identity, src/cloud/aws/instance.ts). The node
 * controller records them as managed, so without this a spot node would always look drifted.
 */
const cloudImpliedLabel = /^node-role\.kubernetes\.io\/[a-z-]+-worker$/;

/** The verified managed keys of a node record under a key: a record is checked once per key. */
const verifiedKeys = new WeakMap<LabelledNodeInfo, { key: Uint8Array; keys: string[] }>();

/**
 * The keys of a node's managed set the NodeController would prune from: the annotation's, when its
 * signature verifies under `key` for this node's name and UID; none otherwise (an unsigned or forged
 * set, or no key), as the controller then prunes nothing but kops' role labels.
 */
function trustedManagedKeys(node: LabelledNodeInfo, key: Uint8Array | undefined): string[] {
  if (key === undefined || node.uid === undefined || node.managedLabelsSignature === undefined) return [];
  const known = verifiedKeys.get(node);
  if (known?.key === key) return known.keys;
  const { name, uid, managedLabels, managedLabelsSignature } = node;
  const { keys } = verifyManagedLabels(key, { name, uid }, managedLabels, managedLabelsSignature);
  verifiedKeys.set(node, { key, keys });
  return keys;
}

/**
 * Whether a node's labels drift from its group's spec: the node controller's own diff
 * ({@link diffLabels}) against the labels the spec asks for is not empty, pruning only from the managed
 * set the controller would believe ({@link trustedManagedKeys}), and ignoring labels the cloud implies
 * (which the spec neither asks for nor removes). So a node cannot make itself count as drifting, or
 * not, by writing its own annotation.
 */
function drifts(
  node: LabelledNodeInfo,
  desired: Record<string, string>,
  key: Uint8Array | undefined,
): boolean {
  const managed = trustedManagedKeys(node, key).filter((k) => !cloudImpliedLabel.test(k));
  return !isEmptyDiff(diffLabels(node.labels, desired, managed));
}

/**
 * Whether the instance was launched from something other than what its group launches now, as kops'
 * rolling update decides (awsup buildCloudInstance: the launch configuration or template version; gce
 * GetCloudGroups: the MIG's instance template). Undefined when the group's template is unknown. A
 * member whose template the cloud does not name is out of date, as in kops.
 */
export function memberNeedsUpdate(
  group: CloudGroup,
  member: CloudGroup['members'][number],
): boolean | undefined {
  if (group.template === undefined) return undefined;
  return member.template !== group.template;
}

/** What the slow inputs (instance groups, cloud groups, cluster spec) fix about the counts. */
export interface HealthPlan {
  /** The groups counted (not bastions, which never join), with the counts nodes do not change. */
  groups: Map<string, InstanceGroupHealth>;
  /** Each group's desired labels; empty without the cluster spec. */
  desiredLabels: Map<string, Record<string, string>>;
  /** The instance group whose cloud group lists an instance, by providerID. */
  groupOfProvider: Map<string, string>;
  /**
   * The members whose template is current, by providerID, with their instance group: a Node of theirs
   * annotated {@link needsUpdateAnnotation} makes them need an update too (kops' AdjustNeedUpdate).
   */
  currentMembers: Map<string, string[]>;
  /**
   * The key the NodeController signs managed-labels sets with, once it has read it: drift then counts
   * the labels the controller would prune from a node's verified set. Without it no node's set is
   * believed, as the controller believes none.
   */
  labelsKey: Uint8Array | undefined;
}

/**
 * The plan for a set of slow inputs. Its groups carry zero node counts, the desired size, and the
 * instances needing an update by template; {@link nodeHealth} adds each node's part.
 */
export function healthPlan(input: Omit<InstanceGroupHealthInput, 'nodes'>): HealthPlan {
  const plan: HealthPlan = {
    groups: new Map(),
    desiredLabels: new Map(),
    groupOfProvider: new Map(),
    currentMembers: new Map(),
    labelsKey: input.labelsKey,
  };
  for (const ig of input.instanceGroups) {
    if (ig.spec.role === 'Bastion') continue;
    const name = ig.metadata.name;
    const cloudGroup = input.cloudGroups.find((g) => g.instanceGroup === name);
    const desired = cloudGroup?.targetSize ?? ig.spec.minSize;
    plan.groups.set(name, {
      instanceGroup: name,
      ready: 0,
      notReady: 0,
      ...(desired !== undefined ? { desired } : {}),
      ...(input.cluster ? { labelDrift: 0 } : {}),
    });
    if (input.cluster) plan.desiredLabels.set(name, buildNodeLabels(input.cluster, ig));
  }
  for (const cloudGroup of input.cloudGroups) {
    const counts = plan.groups.get(cloudGroup.instanceGroup);
    // An instance kops does not see (validation's rule) places no Node and is nothing to roll.
    for (const member of visibleMembers(cloudGroup)) {
      plan.groupOfProvider.set(member.providerID, cloudGroup.instanceGroup);
      if (!counts) continue;
      const outdated = memberNeedsUpdate(cloudGroup, member);
      if (outdated === undefined) continue;
      counts.needingUpdate = (counts.needingUpdate ?? 0) + (outdated ? 1 : 0);
      if (!outdated) {
        const groups = plan.currentMembers.get(member.providerID) ?? [];
        groups.push(cloudGroup.instanceGroup);
        plan.currentMembers.set(member.providerID, groups);
      }
    }
  }
  return plan;
}

/** What one node adds to its group's counts; undefined when it belongs to no counted group. */
export interface NodeHealth {
  instanceGroup: string;
  ready: boolean;
  drift: boolean;
}

/**
 * One node's part. A node belongs to the group whose cloud group lists its instance (the cloud's
 * word; a terminated instance is listed by none, as in validation), else to the one its
 * `kops.k8s.io/instancegroup` label names, as validation places nodes outside any cloud group; a node
 * of neither is counted by the cluster-wide gauges only.
 */
export function nodeHealth(plan: HealthPlan, node: LabelledNodeInfo): NodeHealth | undefined {
  const group =
    (node.providerID !== undefined ? plan.groupOfProvider.get(node.providerID) : undefined) ??
    node.labels[instanceGroupLabel];
  if (group === undefined || !plan.groups.has(group)) return undefined;
  const desired = plan.desiredLabels.get(group);
  return {
    instanceGroup: group,
    ready: isReady(node),
    drift: desired !== undefined && drifts(node, desired, plan.labelsKey),
  };
}

/** Adds (`sign` 1) or takes away (-1) one node's part from the plan's counts. */
export function countNode(plan: HealthPlan, part: NodeHealth | undefined, sign: 1 | -1): void {
  const counts = part && plan.groups.get(part.instanceGroup);
  if (!part || !counts) return;
  if (part.ready) counts.ready += sign;
  else counts.notReady += sign;
  if (part.drift && counts.labelDrift !== undefined) counts.labelDrift += sign;
}

/**
 * Adds (1) or takes away (-1) the current members of a providerID whose Node is annotated
 * {@link needsUpdateAnnotation}: call when the first annotated Node of that providerID appears (1) or
 * the last one goes (-1).
 */
export function countAnnotatedMember(plan: HealthPlan, providerID: string, sign: 1 | -1): void {
  for (const group of plan.currentMembers.get(providerID) ?? []) {
    const counts = plan.groups.get(group);
    if (counts?.needingUpdate !== undefined) counts.needingUpdate += sign;
  }
}

/** The groups' counts as reported, with `missing` derived; sorted by name. */
export function healthCounts(plan: HealthPlan): InstanceGroupHealth[] {
  return [...plan.groups.values()]
    .map((counts) =>
      counts.desired === undefined
        ? { ...counts }
        : { ...counts, missing: Math.max(0, counts.desired - counts.ready - counts.notReady) },
    )
    .sort((a, b) => (a.instanceGroup < b.instanceGroup ? -1 : 1));
}

/** The counts of every instance group that runs nodes, sorted by name (see {@link nodeHealth}). */
export function instanceGroupHealth(input: InstanceGroupHealthInput): InstanceGroupHealth[] {
  const plan = healthPlan(input);
  const annotated = new Set<string>();
  for (const node of input.nodes) {
    countNode(plan, nodeHealth(plan, node), 1);
    if (node.needsUpdate && node.providerID !== undefined && !annotated.has(node.providerID)) {
      annotated.add(node.providerID);
      countAnnotatedMember(plan, node.providerID, 1);
    }
  }
  return healthCounts(plan);
}
