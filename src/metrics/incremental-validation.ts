/**
 * The validation behind the `kops_*` gauges, kept current from watch events instead of recomputed at
 * every scrape: each Node and pod adds a small, fixed part to running counts, and an event takes the
 * object's old part away and adds its new one. A scrape reads the counts, so it costs the same at
 * 5 or 50,000 nodes. The slow inputs (instance groups, cloud groups, the cluster spec) are replaced
 * about once a minute; that recounts every node once.
 *
 * It is {@link validateCluster} with the gauges' inputs (no instance-group filter, no tolerated
 * unready nodes, no DNS check), split by object: each rule (which members are seen and expected to
 * join, which roles are listed, a Node's group and role by its labels, a critical pod's trouble, the
 * static pods a control-plane node lacks, which member a Node is: by providerID, or by name where the
 * cloud identifies nodes by name) is validateCluster's own exported helper, and only the bookkeeping
 * of counts is here. `incremental-validation.test.ts` holds the two equal on random event sequences
 * after every step.
 */
import type { CloudGroup } from '../cloud/types.ts';
import type { Cluster, InstanceGroup } from '../statestore/kops-types.ts';
import {
  type CriticalPodReason,
  criticalPodTrouble,
  expectedToJoin,
  type FailureReason,
  groupAndRoleByLabels,
  isListedRole,
  isMemberNodeBefore,
  isReady,
  memberKeyOf,
  membersByName,
  missingControlPlaneApps,
  type PodInfo,
  podInstanceGroup,
  roleName,
  runningComponentOf,
  type ValidationFailure,
  validateCluster,
  visibleMembers,
} from '../validation/validate-cluster.ts';
import {
  countAnnotatedMember,
  countNode,
  type HealthPlan,
  healthCounts,
  healthPlan,
  type InstanceGroupHealth,
  type LabelledNodeInfo,
  type NodeHealth,
  nodeHealth,
} from './instance-group-health.ts';

/** The inputs that change by refresh, not by watch event. */
export interface SlowInputs {
  instanceGroups: readonly InstanceGroup[];
  cloudGroups: readonly CloudGroup[];
  cluster?: Cluster;
  /** Whether the cloud identifies nodes by name (metal), as validation's input says it. */
  identifiesByNodeName?: boolean;
  /** The NodeController's signing key, for the drift counts (instance-group-health.ts). */
  labelsKey?: Uint8Array;
}

/** The counts the eight node and pod gauges read (the component gauges come from the refresh). */
export interface ValidationCounts {
  /** Nodes validation lists, Ready or not (kops' readiness). */
  nodesReady: number;
  nodesNotReady: number;
  /** Members expected to have a Node that have none. */
  machinesNotJoined: number;
  /** Distinct control-plane components missing on some ready control-plane node. */
  componentsMissing: number;
  podsPending: number;
  podsUnknown: number;
  /** Unready containers of critical pods. */
  containersNotReady: number;
}

/**
 * A failure as programs compare it: the typed reason and what it concerns. The message is display
 * text and the order of failures is not part of the result.
 */
export interface FailureKey {
  reason: FailureReason;
  name: string;
  node?: string;
  instanceGroup?: string;
  app?: string;
  notReadyContainers?: string[];
}

/** A node as validation lists it, for comparison (zone and hostname are display only). */
export interface NodeKey {
  name: string;
  role: string;
  ready: boolean;
  status: string;
}

/** What one pod adds: its failure, when it is a critical pod in trouble (nothing is tolerated here). */
interface PodPart {
  reason: CriticalPodReason;
  pod: PodInfo;
}

function podPartOf(pod: PodInfo): PodPart | undefined {
  const reason = criticalPodTrouble(pod);
  return reason && { reason, pod };
}

const podKey = (pod: PodInfo) => `${pod.namespace}/${pod.name}`;

/** One validation check of a node: as a member of a group, or on its own. */
interface Check {
  ig: InstanceGroup | undefined;
  role: string;
}

/** What one Node adds. */
interface NodePart {
  checks: Check[];
  ready: boolean;
  /** Checks of a listed role: the node appears this many times in validation's node list. */
  listed: number;
  /** Components this ready control-plane node does not run. */
  missing: string[];
  health: NodeHealth | undefined;
}

interface NodeEntry {
  record: LabelledNodeInfo;
  part: NodePart;
  /** The providerID of the member the Node may be ({@link memberKeyOf}), under the current plan. */
  key: string | undefined;
}

/** The slow inputs, indexed for per-node work. */
interface Plan {
  groupByName: Map<string, InstanceGroup>;
  /** The members a Node without providerID is linked to by name ({@link membersByName}). */
  byName: Map<string, string>;
  /** The groups a providerID's member is checked in, in validation's order (member of a known group). */
  memberChecks: Map<string, InstanceGroup[]>;
  /** Members expected to have joined, by providerID. */
  expected: Map<string, { instanceId: string; ig: InstanceGroup }[]>;
  /** Group-level failures (too small, missing from the cloud): they depend on no Node or pod. */
  groupFailures: ValidationFailure[];
  health: HealthPlan;
}

/** The validation of the gauges, kept from events. Feed it {@link setSlowInputs} and the watch events. */
export class IncrementalValidation {
  #plan: Plan | undefined;
  /** Why nothing can be validated (no instance group): validateCluster's own error. */
  #refusal: Error | undefined;
  readonly #nodes = new Map<string, NodeEntry>();
  /** The Nodes that may be each member's, by the member's providerID ({@link NodeEntry.key}). */
  readonly #nodesByMember = new Map<string, Set<string>>();
  /**
   * Nodes per providerID carrying kops' needs-update annotation: their own providerID, by which the
   * per-group health counts place nodes (instance-group-health.ts).
   */
  readonly #annotatedByProvider = new Map<string, number>();
  readonly #pods = new Map<string, PodPart>();
  /** Running kube-system components per node name, with how many pods run each. */
  readonly #componentsOnNode = new Map<string, Map<string, number>>();
  /** Ready control-plane nodes missing each component. */
  readonly #missingComponent = new Map<string, number>();
  #listed = 0;
  #listedReady = 0;
  #notJoined = 0;
  #podsPending = 0;
  #podsUnknown = 0;
  #containersNotReady = 0;

  /** Replaces the slow inputs and recounts every node's part against them. */
  setSlowInputs(inputs: SlowInputs): void {
    // A validation without any Node or pod gives what depends on neither: the group-level failures,
    // or its refusal when there is no instance group.
    let withoutNodes: ValidationFailure[] = [];
    this.#refusal = undefined;
    try {
      withoutNodes = validateCluster({ ...inputs, nodes: [], pods: [] }).failures;
    } catch (err) {
      this.#refusal = err as Error;
    }
    const groupByName = new Map(inputs.instanceGroups.map((ig) => [ig.metadata.name, ig]));
    const memberChecks = new Map<string, InstanceGroup[]>();
    const expected = new Map<string, { instanceId: string; ig: InstanceGroup }[]>();
    for (const cloudGroup of inputs.cloudGroups) {
      const ig = groupByName.get(cloudGroup.instanceGroup);
      if (!ig) continue;
      for (const member of visibleMembers(cloudGroup)) {
        memberChecks.set(member.providerID, [...(memberChecks.get(member.providerID) ?? []), ig]);
        if (!expectedToJoin(ig, member)) continue;
        const { instanceId, providerID } = member;
        expected.set(providerID, [...(expected.get(providerID) ?? []), { instanceId, ig }]);
      }
    }
    const groupFailures = withoutNodes.filter(
      (f) => f.reason === 'group-too-small' || f.reason === 'group-missing-from-cloud',
    );
    const byName = membersByName(inputs);
    this.#plan = { groupByName, byName, memberChecks, expected, groupFailures, health: healthPlan(inputs) };
    this.#listed = 0;
    this.#listedReady = 0;
    this.#missingComponent.clear();
    // Which member a Node without providerID is depends on the members' names: every Node is indexed
    // anew, starting from every expected member not joined.
    this.#notJoined = [...expected.values()].reduce((sum, members) => sum + members.length, 0);
    this.#nodesByMember.clear();
    for (const entry of this.#nodes.values()) {
      entry.key = memberKeyOf(entry.record, byName);
      this.#index(entry);
    }
    for (const providerID of this.#annotatedByProvider.keys()) {
      countAnnotatedMember(this.#plan.health, providerID, 1);
    }
    for (const entry of this.#nodes.values()) {
      entry.part = this.#partOf(entry);
      this.#count(entry.part, 1);
    }
  }

  /** Applies a Node event: `before` is the cached record it replaces (none for an add), `after` none for a delete. */
  nodeChanged(before: LabelledNodeInfo | undefined, after: LabelledNodeInfo | undefined): void {
    const name = (after ?? before)?.name;
    if (name === undefined) return;
    const old = this.#nodes.get(name);
    const touched = new Set<string>();
    if (old) {
      this.#count(old.part, -1);
      this.#unindex(old);
      this.#annotate(old.record, -1);
      if (old.key) touched.add(old.key);
      this.#nodes.delete(name);
    }
    if (after) {
      const key = memberKeyOf(after, this.#plan?.byName ?? noMembersByName);
      const entry: NodeEntry = { record: after, part: emptyPart, key };
      this.#nodes.set(name, entry);
      this.#index(entry);
      this.#annotate(after, 1);
      if (key) touched.add(key);
      entry.part = this.#partOf(entry);
      this.#count(entry.part, 1);
    }
    // Which Node is a member's may have changed for the members involved: recount those Nodes.
    for (const key of touched) {
      for (const other of this.#nodesByMember.get(key) ?? []) {
        if (other !== name) this.#recount(other);
      }
    }
  }

  /** Applies a pod event, as {@link nodeChanged}. */
  podChanged(before: PodInfo | undefined, after: PodInfo | undefined): void {
    const changedNodes = new Set<string>();
    if (before) {
      const part = this.#pods.get(podKey(before));
      if (part) this.#countPod(part, -1);
      this.#pods.delete(podKey(before));
      const component = runningComponentOf(before);
      if (component) {
        const apps = this.#componentsOnNode.get(component.node);
        const left = (apps?.get(component.app) ?? 0) - 1;
        if (left > 0) apps?.set(component.app, left);
        else apps?.delete(component.app);
        if (apps?.size === 0) this.#componentsOnNode.delete(component.node);
        changedNodes.add(component.node);
      }
    }
    if (after) {
      const part = podPartOf(after);
      if (part) {
        this.#pods.set(podKey(after), part);
        this.#countPod(part, 1);
      }
      const component = runningComponentOf(after);
      if (component) {
        const apps = this.#componentsOnNode.get(component.node) ?? new Map<string, number>();
        apps.set(component.app, (apps.get(component.app) ?? 0) + 1);
        this.#componentsOnNode.set(component.node, apps);
        changedNodes.add(component.node);
      }
    }
    for (const node of changedNodes) this.#recountMissing(node);
  }

  /** The counts; throws validateCluster's error when there is nothing to validate. */
  counts(): ValidationCounts {
    this.#ready();
    return {
      nodesReady: this.#listedReady,
      nodesNotReady: this.#listed - this.#listedReady,
      machinesNotJoined: this.#notJoined,
      componentsMissing: [...this.#missingComponent.values()].filter((n) => n > 0).length,
      podsPending: this.#podsPending,
      podsUnknown: this.#podsUnknown,
      containersNotReady: this.#containersNotReady,
    };
  }

  /** The per-instance-group counts, sorted by name. */
  groups(): InstanceGroupHealth[] {
    return healthCounts(this.#ready().health);
  }

  /**
   * The whole result, for comparison with a full validation: its failures and listed nodes (in no
   * particular order). Costs a pass over the failures and nodes; the gauges never call it.
   */
  result(): { failures: FailureKey[]; nodes: NodeKey[] } {
    const plan = this.#ready();
    const groupOfNode = (node: string) => {
      const checks = this.#nodes.get(node)?.part.checks ?? [];
      return checks.findLast((c) => c.ig)?.ig?.metadata.name;
    };
    const failures: FailureKey[] = plan.groupFailures.map(failureKey);
    for (const [providerID, members] of plan.expected) {
      if (this.#nodesByMember.has(providerID)) continue;
      for (const m of members) {
        failures.push({
          reason: 'machine-not-joined',
          name: m.instanceId,
          instanceGroup: m.ig.metadata.name,
        });
      }
    }
    const nodes: NodeKey[] = [];
    for (const { record, part } of this.#nodes.values()) {
      for (const check of part.checks) {
        if (!isListedRole(check.role)) continue;
        nodes.push({ name: record.name, role: check.role, ready: part.ready, status: record.readyStatus });
        if (part.ready) continue;
        failures.push({
          reason: 'node-not-ready',
          name: record.name,
          node: record.name,
          ...(check.ig ? { instanceGroup: check.ig.metadata.name } : {}),
        });
      }
      for (const app of part.missing) {
        const group = groupOfNode(record.name);
        failures.push({
          reason: 'static-pod-missing',
          name: record.name,
          node: record.name,
          app,
          ...(group ? { instanceGroup: group } : {}),
        });
      }
    }
    for (const { reason, pod } of this.#pods.values()) {
      const group = pod.nodeName ? podInstanceGroup(pod, groupOfNode(pod.nodeName)) : undefined;
      failures.push({
        reason,
        name: podKey(pod),
        ...(pod.nodeName ? { node: pod.nodeName } : {}),
        ...(group ? { instanceGroup: group } : {}),
        ...(reason === 'pod-not-ready' ? { notReadyContainers: [...pod.notReadyContainers] } : {}),
      });
    }
    return { failures, nodes };
  }

  #ready(): Plan {
    if (this.#refusal) throw this.#refusal;
    if (!this.#plan) throw new Error('IncrementalValidation: no slow inputs yet');
    return this.#plan;
  }

  /** The Node validation takes as the member's for a providerID (validateCluster's rule). */
  #memberNode(providerID: string): string | undefined {
    let member: string | undefined;
    for (const name of this.#nodesByMember.get(providerID) ?? []) {
      if (this.#nodes.has(name) && (member === undefined || isMemberNodeBefore(member, name))) member = name;
    }
    return member;
  }

  #partOf({ record: node, key }: NodeEntry): NodePart {
    const plan = this.#plan;
    if (!plan) return emptyPart;
    const memberOf = key ? plan.memberChecks.get(key) : undefined;
    let checks: Check[];
    if (memberOf && key && this.#memberNode(key) === node.name) {
      checks = memberOf.map((ig) => ({ ig, role: roleName(ig.spec.role) }));
    } else {
      // Not a member's Node: validateCluster's second pass, by the instance-group label.
      checks = [groupAndRoleByLabels(node, plan.groupByName)];
    }
    const ready = isReady(node);
    return {
      checks,
      ready,
      listed: checks.filter((c) => isListedRole(c.role)).length,
      missing: this.#missingOn(node, ready),
      health: nodeHealth(plan.health, node),
    };
  }

  #missingOn(node: LabelledNodeInfo, ready: boolean): string[] {
    return missingControlPlaneApps(node, ready, this.#componentsOnNode.get(node.name));
  }

  #count(part: NodePart, sign: 1 | -1): void {
    this.#listed += sign * part.listed;
    if (part.ready) this.#listedReady += sign * part.listed;
    for (const app of part.missing)
      this.#missingComponent.set(app, (this.#missingComponent.get(app) ?? 0) + sign);
    if (this.#plan) countNode(this.#plan.health, part.health, sign);
  }

  #countPod(part: PodPart, sign: 1 | -1): void {
    if (part.reason === 'pod-pending') this.#podsPending += sign;
    else if (part.reason === 'pod-unknown-phase') this.#podsUnknown += sign;
    else this.#containersNotReady += sign * part.pod.notReadyContainers.length;
  }

  #recount(name: string): void {
    const entry = this.#nodes.get(name);
    if (!entry) return;
    this.#count(entry.part, -1);
    entry.part = this.#partOf(entry);
    this.#count(entry.part, 1);
  }

  #recountMissing(name: string): void {
    const entry = this.#nodes.get(name);
    if (!entry) return;
    const missing = this.#missingOn(entry.record, entry.part.ready);
    const delta = (apps: string[], sign: 1 | -1) => {
      for (const app of apps) this.#missingComponent.set(app, (this.#missingComponent.get(app) ?? 0) + sign);
    };
    delta(entry.part.missing, -1);
    delta(missing, 1);
    entry.part.missing = missing;
  }

  /** Indexes a Node by its member key; the first Node of a key makes its expected members joined. */
  #index({ record, key }: NodeEntry): void {
    if (!key) return;
    const names = this.#nodesByMember.get(key) ?? new Set<string>();
    if (names.size === 0) {
      this.#nodesByMember.set(key, names);
      this.#notJoined -= this.#plan?.expected.get(key)?.length ?? 0;
    }
    names.add(record.name);
  }

  #unindex({ record, key }: NodeEntry): void {
    if (!key) return;
    const names = this.#nodesByMember.get(key);
    names?.delete(record.name);
    if (names?.size === 0) {
      this.#nodesByMember.delete(key);
      this.#notJoined += this.#plan?.expected.get(key)?.length ?? 0;
    }
  }

  /** Adds (1) or takes away (-1) a Node's needs-update annotation, under its own providerID. */
  #annotate(node: LabelledNodeInfo, sign: 1 | -1): void {
    const providerID = node.providerID;
    if (!node.needsUpdate || !providerID) return;
    const before = this.#annotatedByProvider.get(providerID) ?? 0;
    const after = before + sign;
    if (after > 0) this.#annotatedByProvider.set(providerID, after);
    else this.#annotatedByProvider.delete(providerID);
    // The members count once however many of their Nodes are annotated.
    if (this.#plan && (before === 0) !== (after === 0))
      countAnnotatedMember(this.#plan.health, providerID, sign);
  }
}

const emptyPart: NodePart = { checks: [], ready: false, listed: 0, missing: [], health: undefined };
/** Before the first refresh no member is known by name: a Node is keyed by its providerID. */
const noMembersByName: ReadonlyMap<string, string> = new Map();

/** A full validation's failure as {@link FailureKey}. */
export function failureKey(failure: ValidationFailure): FailureKey {
  return {
    reason: failure.reason,
    name: failure.name,
    ...(failure.node !== undefined ? { node: failure.node } : {}),
    ...(failure.instanceGroup ? { instanceGroup: failure.instanceGroup.metadata.name } : {}),
    ...(failure.app !== undefined ? { app: failure.app } : {}),
    ...(failure.notReadyContainers ? { notReadyContainers: failure.notReadyContainers } : {}),
  };
}
