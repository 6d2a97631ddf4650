/**
 * Health per instance group, from the same inputs as the `kops_*` gauges: how many of a group's
 * nodes are Ready (kops' readiness, {@link isReady}), not Ready, or missing against the group's desired size,
 * and how many carry labels that differ from what the group's spec asks for. Pure: no I/O, no clock.
 */
import type { CloudGroup } from '../cloud/types.ts';
import { buildNodeLabels, instanceGroupLabel } from '../nodelabels/build-node-labels.ts';
import { diffLabels, isEmptyDiff } from '../nodelabels/diff-labels.ts';
import type { Cluster, InstanceGroup } from '../statestore/kops-types.ts';
import { isReady, type NodeInfo } from '../validation/validate-cluster.ts';

/** A node as the health counts read it: validation's view plus the label keys the controller manages. */
export interface LabelledNodeInfo extends NodeInfo {
  /** Keys of the `kops.k8s.io/managed-labels` annotation (parsed). */
  managedLabels?: readonly string[];
}

/** What the counts are computed from. */
export interface InstanceGroupHealthInput {
  instanceGroups: readonly InstanceGroup[];
  cloudGroups: readonly CloudGroup[];
  nodes: readonly LabelledNodeInfo[];
  /** The cluster spec, for the desired labels; without it drift is not counted. */
  cluster?: Cluster;
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
}

/**
 * Labels a cloud implies for an instance rather than the spec (the AWS spot/on-demand lifecycle label
 * the node controller adds from the instance's identity, src/cloud/aws/instance.ts). The node
 * controller records them as managed, so without this a spot node would always look drifted.
 */
const cloudImpliedLabel = /^node-role\.kubernetes\.io\/[a-z-]+-worker$/;

/**
 * Whether a node's labels drift from its group's spec: the node controller's own diff
 * ({@link diffLabels}) against the labels the spec asks for is not empty, ignoring labels the cloud
 * implies (which the spec neither asks for nor removes).
 */
function drifts(node: LabelledNodeInfo, desired: Record<string, string>): boolean {
  const managed = (node.managedLabels ?? []).filter((key) => !cloudImpliedLabel.test(key));
  return !isEmptyDiff(diffLabels(node.labels, desired, managed));
}

/**
 * The counts of every instance group that runs nodes (not bastions, which never join), sorted by name.
 * A node belongs to the group whose cloud group lists its instance (the cloud's word), else to the one
 * its `kops.k8s.io/instancegroup` label names, as validation places nodes outside any cloud group; a
 * node of neither is counted by the cluster-wide gauges only.
 */
export function instanceGroupHealth(input: InstanceGroupHealthInput): InstanceGroupHealth[] {
  const groups = new Map(
    input.instanceGroups.filter((ig) => ig.spec.role !== 'Bastion').map((ig) => [ig.metadata.name, ig]),
  );
  const groupOfProvider = new Map<string, string>();
  for (const cloudGroup of input.cloudGroups) {
    for (const member of cloudGroup.members) groupOfProvider.set(member.providerID, cloudGroup.instanceGroup);
  }
  const desiredLabels = new Map<string, Record<string, string>>();
  const health = new Map<string, InstanceGroupHealth>();
  for (const [name, ig] of groups) {
    const cloudGroup = input.cloudGroups.find((g) => g.instanceGroup === name);
    const desired = cloudGroup?.targetSize ?? ig.spec.minSize;
    health.set(name, {
      instanceGroup: name,
      ready: 0,
      notReady: 0,
      ...(desired !== undefined ? { desired } : {}),
      ...(input.cluster ? { labelDrift: 0 } : {}),
    });
    if (input.cluster) desiredLabels.set(name, buildNodeLabels(input.cluster, ig));
  }
  for (const node of input.nodes) {
    const group =
      (node.providerID !== undefined ? groupOfProvider.get(node.providerID) : undefined) ??
      node.labels[instanceGroupLabel];
    const counts = group !== undefined ? health.get(group) : undefined;
    if (!counts) continue;
    if (isReady(node)) counts.ready++;
    else counts.notReady++;
    const desired = desiredLabels.get(counts.instanceGroup);
    if (desired && counts.labelDrift !== undefined && drifts(node, desired)) counts.labelDrift++;
  }
  for (const counts of health.values()) {
    if (counts.desired !== undefined) {
      counts.missing = Math.max(0, counts.desired - counts.ready - counts.notReady);
    }
  }
  return [...health.values()].sort((a, b) => (a.instanceGroup < b.instanceGroup ? -1 : 1));
}
