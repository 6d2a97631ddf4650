/**
 * `kops validate cluster` semantics as one pure function over plain data: the instance groups, what the cloud
 * says each group runs, the Nodes and the pods. It reports every failure with kops' kinds and messages — and,
 * for programs such as the `kops_*` gauges, a typed reason and the instance group, node, component or
 * containers it concerns — and the nodes it looked at. Follows kops' pkg/validation/validate_cluster.go
 * (kubernetes/kops @ 268927e2).
 */
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import { parseAwsProviderID } from '../cloud/aws/providerid.ts';
import { parseGceProviderID } from '../cloud/gce/resource-names.ts';
import type { CloudGroup, CloudGroupMember } from '../cloud/types.ts';
import { NotFoundError } from '../errors.ts';
import { fieldsOf, isJsonObject, isStringMap } from '../json-object.ts';
import { instanceGroupLabel } from '../nodelabels/build-node-labels.ts';
import type { InstanceGroup, InstanceGroupRole } from '../statestore/kops-types.ts';

/** What validation needs of a Node. */
export interface NodeInfo {
  name: string;
  providerID?: string;
  labels: Record<string, string>;
  /** The Ready condition's status; `Unknown` when the node has none. */
  readyStatus: 'True' | 'False' | 'Unknown';
  /** Whether the NetworkUnavailable condition is True. */
  networkUnavailable: boolean;
}

/** What validation needs of a pod. */
export interface PodInfo {
  namespace: string;
  name: string;
  nodeName?: string;
  priorityClassName?: string;
  phase?: string;
  labels: Record<string, string>;
  /** Names of the containers whose status is not ready. */
  notReadyContainers: string[];
}

/** Everything one validation looks at. */
export interface ValidationInput {
  instanceGroups: readonly InstanceGroup[];
  cloudGroups: readonly CloudGroup[];
  nodes: readonly NodeInfo[];
  pods: readonly PodInfo[];
  /** Unready worker nodes (or machines that have not joined) tolerated, as `--max-unready-nodes`. */
  maxUnreadyNodes?: number;
  /**
   * What the API server's DNS name resolves to, when it is a name (absent for an address, or when
   * not checked, as by the in-cluster gauges).
   */
  apiServer?: { host: string; addresses: readonly string[] };
  /**
   * The instance groups to validate, by name (all when absent or empty), as kops' filterInstanceGroups:
   * their cloud groups, machines and nodes. Critical pods are checked all the same, as in kops.
   */
  instanceGroupFilter?: readonly string[];
  /**
   * Whether the cloud identifies nodes by name (metal): a Node without providerID is then the Node of
   * the member named like it ({@link memberKeyOf}). The provider's `identifiesByNodeName`.
   */
  identifiesByNodeName?: boolean;
}

/** Why a failure was reported: what programs (the `kops_*` gauges) count, never the message text. */
export type FailureReason =
  | 'dns-placeholder'
  | 'group-too-small'
  | 'group-missing-from-cloud'
  | 'machine-not-joined'
  | 'node-not-ready'
  | 'static-pod-missing'
  | 'pod-pending'
  | 'pod-unknown-phase'
  | 'pod-not-ready';

/**
 * One failure, as kops reports it — kind (`type` in its JSON), the object's name, a message, and the
 * instance group it comes from — with its typed reason and the node, static pod (`app`) or containers
 * it concerns.
 */
export interface ValidationFailure {
  type: 'dns' | 'InstanceGroup' | 'Machine' | 'Node' | 'Pod';
  reason: FailureReason;
  name: string;
  message: string;
  instanceGroup?: InstanceGroup;
  /** The node the failure is about, or the node of the pod. */
  node?: string;
  /** For `static-pod-missing`: the missing component (`kube-apiserver`, …). */
  app?: string;
  /** For `pod-not-ready`: the containers that are not ready. */
  notReadyContainers?: string[];
}

/** A node of the cluster, as the `NODE STATUS` table shows it. */
export interface ValidatedNode {
  name: string;
  zone: string;
  role: string;
  hostname: string;
  status: NodeInfo['readyStatus'];
  /** kops' readiness ({@link isReady}): Ready and the network available. */
  ready: boolean;
}

/** The outcome: no failures means the cluster is ready. */
export interface ValidationResult {
  failures: ValidationFailure[];
  nodes: ValidatedNode[];
}

/** Priority classes whose pods must be healthy. */
const criticalPriorities = new Set(['system-cluster-critical', 'system-node-critical']);
/** The static pods every ready control-plane node must run. */
const controlPlaneApps = ['kube-apiserver', 'kube-controller-manager', 'kube-scheduler'];
const controlPlaneLabel = 'node-role.kubernetes.io/control-plane';

/**
 * Whether a member of an instance group's cloud group must have a Node by now. kops excuses only
 * bastions, warm-pool members and detached instances (pkg/validation/validate_cluster.go
 * validateNodes): an instance held by a lifecycle hook in `Terminating:Wait` is expected to have
 * joined, and so is a stopped one outside a warm pool (kops lists stopped EC2 instances, awsup
 * findInstances, and every managed instance of a MIG, gce GetCloudGroups). A warm-pool member counts
 * towards the target size all the same; a terminated one is no member at all ({@link isVisibleMember}).
 */
export function expectedToJoin(ig: InstanceGroup, member: CloudGroupMember): boolean {
  return ig.spec.role !== 'Bastion' && !member.warmPool && isVisibleMember(member);
}

/**
 * Whether validation lists a node of this role and fails it when not ready: control-plane, API
 * server and worker nodes; a bastion's (which runs no kubelet in kops) is neither.
 */
export function isListedRole(role: string): boolean {
  return role === 'control-plane' || role === 'apiserver' || role === 'node';
}

/**
 * The instance group and role of a Node no member accounts for: the group its
 * `kops.k8s.io/instancegroup` label names (when the cluster has it), and that group's role; without
 * one, a control-plane node by its role label, else a worker.
 */
export function groupAndRoleByLabels(
  node: NodeInfo,
  groupByName: ReadonlyMap<string, InstanceGroup>,
): { ig: InstanceGroup | undefined; role: string } {
  const ig = groupByName.get(node.labels[instanceGroupLabel] ?? '');
  if (ig) return { ig, role: roleName(ig.spec.role) };
  return { ig, role: controlPlaneLabel in node.labels ? 'control-plane' : 'node' };
}

/** Why a critical pod fails validation. */
export type CriticalPodReason = Extract<FailureReason, 'pod-pending' | 'pod-unknown-phase' | 'pod-not-ready'>;

/**
 * What is wrong with a pod that must be healthy, if anything: a pod of a critical priority class
 * that has not succeeded is pending, of unknown phase, or has containers that are not ready.
 */
export function criticalPodTrouble(pod: PodInfo): CriticalPodReason | undefined {
  if (!criticalPriorities.has(pod.priorityClassName ?? '') || pod.phase === 'Succeeded') return undefined;
  if (pod.phase === 'Pending') return 'pod-pending';
  if (pod.phase === 'Unknown') return 'pod-unknown-phase';
  return pod.notReadyContainers.length > 0 ? 'pod-not-ready' : undefined;
}

/**
 * The instance group a critical pod's failure names, given its node's: kops names it for
 * system-node-critical pods only.
 */
export function podInstanceGroup<Group>(pod: PodInfo, groupOfItsNode: Group | undefined): Group | undefined {
  return pod.priorityClassName === 'system-node-critical' ? groupOfItsNode : undefined;
}

/**
 * The control-plane component a pod stands for and the node it runs on: a kube-system pod's
 * `k8s-app` label, whatever its phase (kops only looks for the pod).
 */
export function runningComponentOf(pod: PodInfo): { node: string; app: string } | undefined {
  const app = pod.labels['k8s-app'];
  return pod.namespace === 'kube-system' && app && pod.nodeName ? { node: pod.nodeName, app } : undefined;
}

/**
 * The static pods a node lacks: a ready control-plane node must run each control-plane component;
 * `running` holds the components found on it.
 */
export function missingControlPlaneApps(
  node: NodeInfo,
  ready: boolean,
  running: { has(app: string): boolean } | undefined,
): string[] {
  if (!ready || !(controlPlaneLabel in node.labels)) return [];
  return controlPlaneApps.filter((app) => !running?.has(app));
}

/** kops' node readiness: Ready is True and the network is not reported unavailable. */
export function isReady(node: NodeInfo): boolean {
  return node.readyStatus === 'True' && !node.networkUnavailable;
}

/** The role name kops prints for an instance-group role. */
export function roleName(role: InstanceGroupRole): string {
  return role === 'ControlPlane' ? 'control-plane' : role.toLowerCase();
}

/**
 * The addresses kops writes into a cluster's DNS records before dns-controller (or external-dns)
 * publishes the real ones (kops' pkg/dns/placeholder.go).
 */
const placeholderAddresses = ['203.0.113.123', 'fd00:dead:add::'];

/** Whether an address is one of kops' placeholders. */
export function isPlaceholderAddress(address: string): boolean {
  return placeholderAddresses.includes(address.toLowerCase());
}

/**
 * The API name still pointing at kops' placeholder: nothing else can be judged yet, so it is the
 * only failure, as in kops.
 */
function placeholderFailure(input: ValidationInput): ValidationFailure | undefined {
  const { apiServer } = input;
  const found = apiServer?.addresses.filter(isPlaceholderAddress) ?? [];
  if (!apiServer || found.length === 0) return undefined;
  return {
    type: 'dns',
    reason: 'dns-placeholder',
    name: 'apiserver',
    message:
      `the API server name ${apiServer.host} still resolves to kops' placeholder address ` +
      `${found.join(', ')}: dns-controller (or external-dns) has not published the control plane's ` +
      'address yet. Check that it runs and can update the DNS zone.',
  };
}

/**
 * The instance groups the input selects, by name. An empty list is kops' refusal ("no InstanceGroup
 * objects found": pkg/validation/validate_cluster.go NewClusterValidator), since there would be
 * nothing to check; a name the cluster lacks would select nothing either.
 */
function selectedGroups(input: ValidationInput): Map<string, InstanceGroup> {
  if (input.instanceGroups.length === 0) {
    throw new NotFoundError(
      'no InstanceGroup objects found: the state store holds no instance group of this cluster ' +
        '(is configBase right?), so there is nothing to validate',
    );
  }
  const all = new Map(input.instanceGroups.map((ig) => [ig.metadata.name, ig]));
  const filter = input.instanceGroupFilter ?? [];
  if (filter.length === 0) return all;
  const unknown = filter.find((name) => !all.has(name));
  if (unknown !== undefined) {
    throw new NotFoundError(
      `instance group "${unknown}" not found; the cluster has: ${[...all.keys()].sort().join(', ')}`,
    );
  }
  return new Map(filter.map((name) => [name, all.get(name) as InstanceGroup]));
}

/**
 * Whether kops sees a member: it reads instances in state pending, running, stopping or stopped only
 * (upup/pkg/fi/cloudup/awsup/aws_cloud.go findInstances), so a terminated one neither counts
 * towards the target size nor is expected to join.
 */
export function isVisibleMember(member: CloudGroupMember): boolean {
  return member.state !== 'terminated';
}

/** The members of a cloud group kops sees ({@link isVisibleMember}). */
export function visibleMembers(cloudGroup: CloudGroup): CloudGroupMember[] {
  return cloudGroup.members.filter(isVisibleMember);
}

/** The zone of a node: its zone label (as kops reads it), else the zone its providerID names. */
function zoneOf(node: NodeInfo): string {
  const label = node.labels['topology.kubernetes.io/zone'];
  if (label) return label;
  const providerID = node.providerID ?? '';
  try {
    if (providerID.startsWith('aws://')) return parseAwsProviderID(providerID).zone;
    if (providerID.startsWith('gce://')) return parseGceProviderID(providerID).zone;
  } catch {
    // A malformed providerID names no zone; the node is still validated.
  }
  return '';
}

/**
 * The members a Node without providerID can be linked to by its name, as name → the member's
 * providerID: on a cloud that identifies nodes by name only (none elsewhere). On metal, kops' nodeup
 * sets no providerID and no cloud controller does, and kops' metal GetCloudGroups
 * (upup/pkg/fi/cloudup/metal/cloud.go) takes the Nodes themselves, by name, as the group's instances;
 * the inventory names each host as its Node is named. The first member of a name wins, so one order of
 * the cloud groups gives one answer.
 */
export function membersByName(
  input: Pick<ValidationInput, 'cloudGroups' | 'identifiesByNodeName'>,
): Map<string, string> {
  const byName = new Map<string, string>();
  if (!input.identifiesByNodeName) return byName;
  for (const cloudGroup of input.cloudGroups) {
    for (const member of visibleMembers(cloudGroup)) {
      if (!byName.has(member.instanceId)) byName.set(member.instanceId, member.providerID);
    }
  }
  return byName;
}

/**
 * The providerID under which a Node is a member's: its own, else (a Node without one, on a cloud that
 * identifies nodes by name) that of the member named like it; undefined when it names none.
 */
export function memberKeyOf(node: NodeInfo, byName: ReadonlyMap<string, string>): string | undefined {
  return node.providerID || byName.get(node.name);
}

/** One validation: what it reads, indexed, and what it has found so far. */
interface Validation {
  input: ValidationInput;
  /** The instance groups validated (all, or those the filter names). */
  selected: Map<string, InstanceGroup>;
  /** The Node of each member, by the member's providerID ({@link memberKeyOf}). */
  nodeByProvider: Map<string | undefined, NodeInfo>;
  groupByName: Map<string, InstanceGroup>;
  /** The nodes and machines `maxUnreadyNodes` forgives. */
  tolerated: Set<string>;
  failures: ValidationFailure[];
  nodes: ValidatedNode[];
  groupOfNode: Map<string, InstanceGroup>;
  readyNodes: Set<string>;
}

/** kops' check of one node of role `role`: listed, and failed when not ready (unless tolerated). */
function checkNode(run: Validation, node: NodeInfo, ig: InstanceGroup | undefined, role: string): void {
  if (ig) run.groupOfNode.set(node.name, ig);
  const ready = isReady(node);
  if (ready) run.readyNodes.add(node.name);
  if (!isListedRole(role)) return;
  if (!ready && !run.tolerated.has(node.name)) {
    const failure: ValidationFailure = {
      type: 'Node',
      reason: 'node-not-ready',
      name: node.name,
      message: `node "${node.name}" of role "${role}" is not ready`,
      node: node.name,
    };
    if (ig) failure.instanceGroup = ig;
    run.failures.push(failure);
  }
  run.nodes.push({
    name: node.name,
    zone: zoneOf(node),
    role,
    hostname: node.labels['kubernetes.io/hostname'] ?? '',
    status: node.readyStatus,
    ready,
  });
}

/** The Nodes some cloud group of a known instance group accounts for. */
function memberNodesOf(run: Validation): Set<string> {
  const memberNodes = new Set<string>();
  for (const cloudGroup of run.input.cloudGroups) {
    if (!run.groupByName.has(cloudGroup.instanceGroup)) continue;
    for (const member of visibleMembers(cloudGroup)) {
      const node = run.nodeByProvider.get(member.providerID);
      if (node) memberNodes.add(node.name);
    }
  }
  return memberNodes;
}

/** One selected group in the cloud: big enough, each member a node (checked) or a machine yet to join. */
function checkCloudGroup(run: Validation, cloudGroup: CloudGroup, ig: InstanceGroup): void {
  const name = ig.metadata.name;
  const members = visibleMembers(cloudGroup);
  if (members.length < cloudGroup.targetSize) {
    run.failures.push({
      type: 'InstanceGroup',
      reason: 'group-too-small',
      name,
      message: `InstanceGroup "${name}" did not have enough nodes ${members.length} vs ${cloudGroup.targetSize}`,
      instanceGroup: ig,
    });
  }
  for (const member of members) {
    const node = run.nodeByProvider.get(member.providerID);
    if (node) {
      checkNode(run, node, ig, roleName(ig.spec.role));
    } else if (expectedToJoin(ig, member) && !run.tolerated.has(member.instanceId)) {
      run.failures.push({
        type: 'Machine',
        reason: 'machine-not-joined',
        name: member.instanceId,
        message: `machine "${member.instanceId}" has not yet joined cluster`,
        instanceGroup: ig,
      });
    }
  }
}

/**
 * A Node that no group's member accounts for (a detached instance, a machine joined outside any
 * cloud group) is still a node of the cluster: kops checks the nodes of its detached instances the
 * same way, so a NotReady one fails here too. Its group is the one its instance-group label names.
 */
function checkUngroupedNodes(run: Validation, memberNodes: Set<string>): void {
  const filtered = (run.input.instanceGroupFilter ?? []).length > 0;
  for (const node of run.input.nodes) {
    if (memberNodes.has(node.name)) continue;
    const { ig, role } = groupAndRoleByLabels(node, run.groupByName);
    if (filtered && !(ig && run.selected.has(ig.metadata.name))) continue;
    checkNode(run, node, ig, role);
  }
}

/** Selected instance groups the cloud has no group for. */
function checkGroupsInCloud(run: Validation): void {
  const inCloud = new Set(run.input.cloudGroups.map((g) => g.instanceGroup));
  for (const ig of run.selected.values()) {
    if (inCloud.has(ig.metadata.name)) continue;
    run.failures.push({
      type: 'InstanceGroup',
      reason: 'group-missing-from-cloud',
      name: ig.metadata.name,
      message: `InstanceGroup "${ig.metadata.name}" is missing from the cloud provider`,
      instanceGroup: ig,
    });
  }
}

/**
 * Of two Nodes naming one member (by providerID, or by name: {@link memberKeyOf}), whether the
 * member's is `b`, not `a`: the last by name, which is what kops' validation takes from the API
 * server's list (in name order), whatever order the Nodes come in — so a cache that re-listed, or the
 * gauges' incremental counts, agree with `validate`.
 */
export function isMemberNodeBefore(a: string, b: string): boolean {
  return a < b;
}

/** Validates the cluster. Throws NotFoundError when there is no instance group to validate. */
export function validateCluster(input: ValidationInput): ValidationResult {
  const selected = selectedGroups(input);
  const placeholder = placeholderFailure(input);
  if (placeholder) return { failures: [placeholder], nodes: [] };
  const nodeByProvider = new Map<string | undefined, NodeInfo>();
  const byName = membersByName(input);
  for (const node of input.nodes) {
    const key = memberKeyOf(node, byName);
    if (!key) continue;
    const seen = nodeByProvider.get(key);
    if (!seen || isMemberNodeBefore(seen.name, node.name)) nodeByProvider.set(key, node);
  }
  const groupByName = new Map(input.instanceGroups.map((ig) => [ig.metadata.name, ig]));
  const run: Validation = {
    input,
    selected,
    nodeByProvider,
    groupByName,
    tolerated: toleratedNodes(input, nodeByProvider, groupByName),
    failures: [],
    nodes: [],
    groupOfNode: new Map(),
    readyNodes: new Set(),
  };
  // Nodes some cloud group accounts for; the others are checked after the groups.
  const memberNodes = memberNodesOf(run);
  for (const cloudGroup of input.cloudGroups) {
    const ig = selected.get(cloudGroup.instanceGroup);
    if (ig) checkCloudGroup(run, cloudGroup, ig);
  }
  checkUngroupedNodes(run, memberNodes);
  checkGroupsInCloud(run);
  run.failures.push(...podFailures(input, run.readyNodes, run.groupOfNode, run.tolerated));
  return { failures: run.failures, nodes: run.nodes };
}

/**
 * The worker nodes (and machines without a node) that `maxUnreadyNodes` forgives: all of them when
 * there are at least one and at most that many, else none.
 */
function toleratedNodes(
  input: ValidationInput,
  nodeByProvider: Map<string | undefined, NodeInfo>,
  groupByName: Map<string, InstanceGroup>,
): Set<string> {
  const unready: string[] = [];
  for (const cloudGroup of input.cloudGroups) {
    const ig = groupByName.get(cloudGroup.instanceGroup);
    if (ig?.spec.role !== 'Node') continue;
    for (const member of visibleMembers(cloudGroup)) {
      const node = nodeByProvider.get(member.providerID);
      if (node ? !isReady(node) : expectedToJoin(ig, member)) unready.push(node?.name ?? member.instanceId);
    }
  }
  const max = input.maxUnreadyNodes ?? 0;
  return new Set(unready.length > 0 && unready.length <= max ? unready : []);
}

/** A critical pod's trouble as kops words it. */
function podProblem(
  pod: PodInfo,
  reason: CriticalPodReason,
): Pick<ValidationFailure, 'reason' | 'message' | 'notReadyContainers'> {
  const what = `${pod.priorityClassName} pod "${pod.name}"`;
  if (reason === 'pod-pending') return { reason, message: `${what} is pending` };
  if (reason === 'pod-unknown-phase') return { reason, message: `${what} is unknown phase` };
  return {
    reason,
    message: `${what} is not ready (${pod.notReadyContainers.join(',')})`,
    notReadyContainers: [...pod.notReadyContainers],
  };
}

/** The control-plane apps each Ready control-plane node runs no kube-system pod of. */
function missingStaticPods(input: ValidationInput, readyNodes: Set<string>): Map<string, string[]> {
  const running = new Map<string, Set<string>>();
  for (const pod of input.pods) {
    const component = runningComponentOf(pod);
    if (component) running.set(component.node, (running.get(component.node) ?? new Set()).add(component.app));
  }
  const missing = new Map<string, string[]>();
  for (const node of input.nodes) {
    const apps = missingControlPlaneApps(node, readyNodes.has(node.name), running.get(node.name));
    if (apps.length > 0) missing.set(node.name, apps);
  }
  return missing;
}

/** Critical pods that are not running well, and control-plane static pods that are missing. */
function podFailures(
  input: ValidationInput,
  readyNodes: Set<string>,
  groupOfNode: Map<string, InstanceGroup>,
  tolerated: Set<string>,
): ValidationFailure[] {
  const failures: ValidationFailure[] = [];
  for (const pod of input.pods) {
    const reason = criticalPodTrouble(pod);
    if (!reason || (pod.nodeName && tolerated.has(pod.nodeName))) continue;
    const failure: ValidationFailure = {
      type: 'Pod',
      name: `${pod.namespace}/${pod.name}`,
      ...podProblem(pod, reason),
    };
    if (pod.nodeName) failure.node = pod.nodeName;
    const group = pod.nodeName ? podInstanceGroup(pod, groupOfNode.get(pod.nodeName)) : undefined;
    if (group) failure.instanceGroup = group;
    failures.push(failure);
  }
  for (const [node, apps] of missingStaticPods(input, readyNodes)) {
    const group = groupOfNode.get(node);
    for (const app of apps) {
      const failure: ValidationFailure = {
        type: 'Node',
        reason: 'static-pod-missing',
        name: node,
        message: `control-plane node "${node}" is missing ${app} pod`,
        node,
        app,
      };
      if (group) failure.instanceGroup = group;
      failures.push(failure);
    }
  }
  return failures;
}

/** A Node as validation reads it. */
export function nodeInfoOf(node: V1Node): NodeInfo {
  // The object as the API server sent it, whatever its types: a field that is not what the API
  // server sends (labels that are not a map of strings, conditions that are not a list of them, a
  // providerID that is not a string) makes the Node unreadable, and an unreadable Node is not ready
  // (Unknown), never counted as ready nor left out of the count.
  const wire = node as unknown as { metadata?: unknown; spec?: unknown; status?: unknown };
  const metadata = fieldsOf(wire.metadata);
  const sentLabels = metadata['labels'] ?? {};
  const labels = isStringMap(sentLabels) ? sentLabels : undefined;
  const spec = fieldsOf(wire.spec);
  const providerID = spec['providerID'];
  const status = objectOr(wire.status ?? {}, undefined);
  const conditions = status === undefined ? undefined : (status['conditions'] ?? []);
  const readable =
    labels !== undefined &&
    (providerID === undefined || providerID === null || typeof providerID === 'string') &&
    Array.isArray(conditions) &&
    conditions.every((c) => isJsonObject(c) && typeof c['type'] === 'string');
  const name = typeof metadata['name'] === 'string' ? metadata['name'] : '';
  if (!readable) {
    return {
      name,
      labels: labels ?? {},
      readyStatus: 'Unknown',
      networkUnavailable: false,
      ...(typeof providerID === 'string' && providerID !== '' ? { providerID } : {}),
    };
  }
  const condition = (type: string) =>
    (conditions as Record<string, unknown>[]).find((c) => c['type'] === type)?.['status'];
  const ready = condition('Ready');
  const info: NodeInfo = {
    name,
    labels,
    readyStatus: ready === 'True' || ready === 'False' ? ready : 'Unknown',
    networkUnavailable: condition('NetworkUnavailable') === 'True',
  };
  if (typeof providerID === 'string' && providerID !== '') info.providerID = providerID;
  return info;
}

/** `value` when it is an object of JSON, else `otherwise`. */
function objectOr<T>(value: unknown, otherwise: T): Record<string, unknown> | T {
  return isJsonObject(value) ? value : otherwise;
}

/** A pod as validation reads it. */
export function podInfoOf(pod: V1Pod): PodInfo {
  // As for Nodes: a status that cannot be read (not an object, a phase that is not a string,
  // container statuses that are not a list of them) is the pod's state unknown, phase `Unknown`,
  // so a critical pod in that state is counted in trouble rather than as healthy or absent.
  const wire = pod as unknown as { metadata?: unknown; spec?: unknown; status?: unknown };
  const metadata = fieldsOf(wire.metadata);
  const spec = fieldsOf(wire.spec);
  const status = objectOr(wire.status ?? {}, undefined);
  const phase = status?.['phase'];
  const statuses = status === undefined ? undefined : (status['containerStatuses'] ?? []);
  const readable =
    status !== undefined &&
    (phase === undefined || phase === null || typeof phase === 'string') &&
    Array.isArray(statuses) &&
    statuses.every((c) => isJsonObject(c) && typeof c['name'] === 'string');
  const text = (value: unknown) => (typeof value === 'string' ? value : '');
  const info: PodInfo = {
    namespace: text(metadata['namespace']),
    name: text(metadata['name']),
    labels: isStringMap(metadata['labels']) ? metadata['labels'] : {},
    notReadyContainers: readable
      ? (statuses as Record<string, unknown>[])
          .filter((c) => c['ready'] !== true)
          .map((c) => c['name'] as string)
      : [],
  };
  if (text(spec['nodeName'])) info.nodeName = text(spec['nodeName']);
  if (text(spec['priorityClassName'])) info.priorityClassName = text(spec['priorityClassName']);
  if (!readable) info.phase = 'Unknown';
  else if (typeof phase === 'string' && phase !== '') info.phase = phase;
  return info;
}
