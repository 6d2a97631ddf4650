/**
 * `kops validate cluster` semantics (reference kops-controller.md §5.2) as one pure function over
 * plain data: the instance groups, what the cloud says each group runs, the Nodes and the pods. It
 * reports every failure with kops' kinds and messages, and the nodes it looked at. The DNS placeholder
 * check of kops is not part of it: it needs a resolver, not cluster state.
 */
import type { V1Node, V1Pod } from '@kubernetes/client-node';
import type { CloudGroup } from '../cloud/types.ts';
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
}

/** One failure, as kops reports it: kind (`type` in its JSON), the object's name and a message. */
export interface ValidationFailure {
  type: 'dns' | 'InstanceGroup' | 'Machine' | 'Node' | 'Pod';
  name: string;
  message: string;
  instanceGroup?: string;
}

/** A node of the cluster, as the `NODE STATUS` table shows it. */
export interface ValidatedNode {
  name: string;
  zone: string;
  role: string;
  hostname: string;
  status: NodeInfo['readyStatus'];
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
 * Whether an instance without a Node is late: a stopped one (an AWS warm-pool instance) or one being
 * terminated is not expected to join, as kops skips its warm pool and detached instances.
 */
function expectedToJoin(member: CloudGroup['members'][number]): boolean {
  return member.state !== 'stopped' && member.state !== 'stopping' && member.state !== 'terminated';
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
    name: 'apiserver',
    message:
      `the API server name ${apiServer.host} still resolves to kops' placeholder address ` +
      `${found.join(', ')}: dns-controller (or external-dns) has not published the control plane's ` +
      'address yet. Check that it runs and can update the DNS zone.',
  };
}

/** Validates the cluster. */
export function validateCluster(input: ValidationInput): ValidationResult {
  const placeholder = placeholderFailure(input);
  if (placeholder) return { failures: [placeholder], nodes: [] };
  const failures: ValidationFailure[] = [];
  const nodes: ValidatedNode[] = [];
  const nodeByProvider = new Map(input.nodes.filter((n) => n.providerID).map((n) => [n.providerID, n]));
  const groupByName = new Map(input.instanceGroups.map((ig) => [ig.metadata.name, ig]));
  const tolerated = toleratedNodes(input, nodeByProvider, groupByName);
  const groupOfNode = new Map<string, string>();
  const readyNodes = new Set<string>();

  for (const cloudGroup of input.cloudGroups) {
    const ig = groupByName.get(cloudGroup.instanceGroup);
    if (!ig) continue;
    const name = ig.metadata.name;
    const members = cloudGroup.members;
    if (members.length < cloudGroup.targetSize) {
      failures.push({
        type: 'InstanceGroup',
        name,
        message: `InstanceGroup "${name}" did not have enough nodes ${members.length} vs ${cloudGroup.targetSize}`,
        instanceGroup: name,
      });
    }
    const role = roleName(ig.spec.role);
    for (const member of members) {
      const node = nodeByProvider.get(member.providerID);
      if (!node) {
        if (ig.spec.role !== 'Bastion' && expectedToJoin(member) && !tolerated.has(member.instanceId)) {
          failures.push({
            type: 'Machine',
            name: member.instanceId,
            message: `machine "${member.instanceId}" has not yet joined cluster`,
            instanceGroup: name,
          });
        }
        continue;
      }
      groupOfNode.set(node.name, name);
      const ready = isReady(node);
      if (ready) readyNodes.add(node.name);
      if (role !== 'control-plane' && role !== 'apiserver' && role !== 'node') continue;
      if (!ready && !tolerated.has(node.name)) {
        failures.push({
          type: 'Node',
          name: node.name,
          message: `node "${node.name}" of role "${role}" is not ready`,
          instanceGroup: name,
        });
      }
      nodes.push({
        name: node.name,
        zone: node.labels['topology.kubernetes.io/zone'] ?? '',
        role,
        hostname: node.labels['kubernetes.io/hostname'] ?? '',
        status: node.readyStatus,
      });
    }
  }
  const inCloud = new Set(input.cloudGroups.map((g) => g.instanceGroup));
  for (const ig of input.instanceGroups) {
    if (inCloud.has(ig.metadata.name)) continue;
    failures.push({
      type: 'InstanceGroup',
      name: ig.metadata.name,
      message: `InstanceGroup "${ig.metadata.name}" is missing from the cloud provider`,
      instanceGroup: ig.metadata.name,
    });
  }
  failures.push(...podFailures(input, readyNodes, groupOfNode, tolerated));
  return { failures, nodes };
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
    if (groupByName.get(cloudGroup.instanceGroup)?.spec.role !== 'Node') continue;
    for (const member of cloudGroup.members) {
      const node = nodeByProvider.get(member.providerID);
      if (node ? !isReady(node) : expectedToJoin(member)) unready.push(node?.name ?? member.instanceId);
    }
  }
  const max = input.maxUnreadyNodes ?? 0;
  return new Set(unready.length > 0 && unready.length <= max ? unready : []);
}

/** Critical pods that are not running well, and control-plane static pods that are missing. */
function podFailures(
  input: ValidationInput,
  readyNodes: Set<string>,
  groupOfNode: Map<string, string>,
  tolerated: Set<string>,
): ValidationFailure[] {
  const failures: ValidationFailure[] = [];
  const missing = new Map<string, Set<string>>();
  for (const node of input.nodes) {
    if (readyNodes.has(node.name) && controlPlaneLabel in node.labels) {
      missing.set(node.name, new Set(controlPlaneApps));
    }
  }
  for (const pod of input.pods) {
    const app = pod.labels['k8s-app'];
    if (pod.namespace === 'kube-system' && app && pod.nodeName) missing.get(pod.nodeName)?.delete(app);
  }
  for (const pod of input.pods) {
    const priority = pod.priorityClassName ?? '';
    if (!criticalPriorities.has(priority) || pod.phase === 'Succeeded') continue;
    if (pod.nodeName && tolerated.has(pod.nodeName)) continue;
    const what = `${priority} pod "${pod.name}"`;
    const message =
      pod.phase === 'Pending'
        ? `${what} is pending`
        : pod.phase === 'Unknown'
          ? `${what} is unknown phase`
          : pod.notReadyContainers.length > 0
            ? `${what} is not ready (${pod.notReadyContainers.join(',')})`
            : undefined;
    if (!message) continue;
    const group =
      priority === 'system-node-critical' && pod.nodeName ? groupOfNode.get(pod.nodeName) : undefined;
    failures.push({
      type: 'Pod',
      name: `${pod.namespace}/${pod.name}`,
      message,
      ...(group ? { instanceGroup: group } : {}),
    });
  }
  for (const [node, apps] of missing) {
    for (const app of apps) {
      failures.push({
        type: 'Node',
        name: node,
        message: `control-plane node "${node}" is missing ${app} pod`,
        ...(groupOfNode.has(node) ? { instanceGroup: groupOfNode.get(node) as string } : {}),
      });
    }
  }
  return failures;
}

/** A Node as validation reads it. */
export function nodeInfoOf(node: V1Node): NodeInfo {
  const condition = (type: string) => node.status?.conditions?.find((c) => c.type === type)?.status;
  const ready = condition('Ready');
  return {
    name: node.metadata?.name ?? '',
    ...(node.spec?.providerID ? { providerID: node.spec.providerID } : {}),
    labels: node.metadata?.labels ?? {},
    readyStatus: ready === 'True' || ready === 'False' ? ready : 'Unknown',
    networkUnavailable: condition('NetworkUnavailable') === 'True',
  };
}

/** A pod as validation reads it. */
export function podInfoOf(pod: V1Pod): PodInfo {
  return {
    namespace: pod.metadata?.namespace ?? '',
    name: pod.metadata?.name ?? '',
    ...(pod.spec?.nodeName ? { nodeName: pod.spec.nodeName } : {}),
    ...(pod.spec?.priorityClassName ? { priorityClassName: pod.spec.priorityClassName } : {}),
    ...(pod.status?.phase ? { phase: pod.status.phase } : {}),
    labels: pod.metadata?.labels ?? {},
    notReadyContainers: (pod.status?.containerStatuses ?? []).filter((c) => !c.ready).map((c) => c.name),
  };
}
