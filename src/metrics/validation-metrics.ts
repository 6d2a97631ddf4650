/**
 * The MetricsServer: the result of `kops validate cluster` as the eight `kops_*` gauges
 * (label `cluster_name`), served on the controller's `/metrics`. A scrape costs no API or cloud call
 * and does not grow with the cluster: Nodes and pods come from watches whose events keep the counts
 * ({@link IncrementalValidation}), and the cloud's groups, the instance groups and the component
 * statuses from a background refresh (every minute by default). Runs on the leader only, so one
 * replica reports; the gauges have no samples until the first refresh, and none on other replicas.
 */
import type { CoreV1Api, KubeConfig, V1ComponentStatus, V1Node, V1Pod } from '@kubernetes/client-node';
import { Gauge, type Registry } from 'prom-client';
import type { CloudGroup, CloudGroups } from '../cloud/types.ts';
import { bounded } from '../deadline.ts';
import { describeError } from '../errors.ts';
import { fieldsOf } from '../json-object.ts';
import { fromApiException } from '../kube/api-errors.ts';
import { abortingWith } from '../kube/call-options.ts';
import { Informer, type InformerCache, kubeList, kubeWatch } from '../kube/informer.ts';
import type { SharedInformer } from '../kube/shared-informer.ts';
import { type Logger, RecurringFailureLog, silentLogger } from '../log.ts';
import { managedLabelsAnnotation } from '../nodelabels/diff-labels.ts';
import { managedLabelsSignatureAnnotation } from '../nodelabels/signed-managed-labels.ts';
import { Backoff } from '../runtime/backoff.ts';
import { sleep, systemClock } from '../runtime/clock.ts';
import type { LeaderComponent } from '../runtime/controller-runtime.ts';
import type { Cluster, InstanceGroup } from '../statestore/kops-types.ts';
import {
  type FailureReason,
  nodeInfoOf,
  type PodInfo,
  podInfoOf,
  type ValidationResult,
  validateCluster,
} from '../validation/validate-cluster.ts';
import { validationReadTimeoutMs } from '../validation-io/gather.ts';
import { IncrementalValidation, type ValidationCounts } from './incremental-validation.ts';
import {
  type InstanceGroupHealth,
  type LabelledNodeInfo,
  needsUpdateAnnotation,
} from './instance-group-health.ts';

/** The eight gauges and their help texts; the alert rules and dashboard in deploy/ select them by these names. */
const gaugeHelp = {
  kops_component_healthy: 'Healthy components of the kubernetes cluster.',
  kops_component_unhealthy: 'Unhealthy components of the kubernetes cluster.',
  kops_node_notReady: 'Not ready nodes in the kubernetes cluster.',
  kops_node_ready: 'Ready nodes in the kubernetes cluster.',
  kops_pod_missing: 'Missing pods in the kubernetes cluster.',
  kops_pod_notReady: 'Not ready pods in the kubernetes cluster.',
  kops_pod_pending: 'Pending pods in the kubernetes cluster.',
  kops_pod_unknown: 'Unknown pods in the kubernetes cluster.',
} as const;
export type ValidationGauge = keyof typeof gaugeHelp;

/**
 * The per-instance-group gauges (labels `cluster_name`, `instance_group`). Node counts share one name
 * with a `state` label, so `sum without (state)` is the group's nodes plus what it lacks; the desired
 * size, the drift and the instances needing an update are separate names because they are not states
 * of a node.
 */
const groupGaugeHelp = {
  kops_instance_group_nodes:
    'Nodes of the instance group by state: ready, not_ready, or missing (desired minus the nodes present).',
  kops_instance_group_desired_nodes:
    "Desired size of the instance group: its cloud group's target size, else the spec's minSize.",
  kops_instance_group_nodes_label_drift:
    'Nodes of the instance group whose labels differ from the labels its spec asks for.',
  kops_instance_group_nodes_needing_update:
    'Instances of the instance group that kops rolling-update would replace: launched from an older launch template version, launch configuration or instance template than the group launches now, or whose Node is annotated kops.k8s.io/needs-update.',
} as const;

/** What the gauges are computed from. */
export interface ValidationSnapshot {
  instanceGroups: readonly InstanceGroup[];
  cloudGroups: readonly CloudGroup[];
  nodes: readonly LabelledNodeInfo[];
  pods: readonly PodInfo[];
  /** Each component's health: all its conditions True. */
  components: readonly { name: string; healthy: boolean }[];
  /** The cluster spec, for the labels an instance group's nodes should carry (no drift gauge without it). */
  cluster?: Cluster;
  /** Whether the cloud identifies nodes by name (metal), as validation's input says it. */
  identifiesByNodeName?: boolean;
  /** The key the NodeController signs managed-labels sets with, when it holds one (drift gauge). */
  labelsKey?: Uint8Array;
}

/**
 * The counts a full validation result gives, as {@link IncrementalValidation} keeps them: the nodes
 * validation checked, Ready or not (kops' readiness), machines expected to join that have not, critical
 * pods pending or of unknown phase, their unready containers, and the control-plane components missing
 * somewhere (each once) — counted from typed failures, never from the wording of a message.
 */
export function countsOf(result: ValidationResult): ValidationCounts {
  const count = (reason: FailureReason) => result.failures.filter((f) => f.reason === reason).length;
  const ready = result.nodes.filter((n) => n.ready).length;
  return {
    nodesReady: ready,
    nodesNotReady: result.nodes.length - ready,
    machinesNotJoined: count('machine-not-joined'),
    componentsMissing: new Set(
      result.failures.filter((f) => f.reason === 'static-pod-missing').map((f) => f.app),
    ).size,
    podsPending: count('pod-pending'),
    podsUnknown: count('pod-unknown-phase'),
    containersNotReady: result.failures.reduce((sum, f) => sum + (f.notReadyContainers?.length ?? 0), 0),
  };
}

/**
 * The eight gauges from the counts, as kops' exporter reported them: a machine that has not joined
 * is a not-ready node; a pod counts once per unready container.
 */
export function gaugeValues(
  counts: ValidationCounts,
  components: ValidationSnapshot['components'],
): Record<ValidationGauge, number> {
  return {
    kops_component_healthy: components.filter((c) => c.healthy).length,
    kops_component_unhealthy: components.filter((c) => !c.healthy).length,
    kops_node_ready: counts.nodesReady,
    kops_node_notReady: counts.nodesNotReady + counts.machinesNotJoined,
    kops_pod_missing: counts.componentsMissing,
    kops_pod_notReady: counts.containersNotReady,
    kops_pod_pending: counts.podsPending,
    kops_pod_unknown: counts.podsUnknown,
  };
}

/** The gauge values for a full validation result. */
export function validationGaugesOf(
  result: ValidationResult,
  components: ValidationSnapshot['components'],
): Record<ValidationGauge, number> {
  return gaugeValues(countsOf(result), components);
}

/**
 * The gauge values for a snapshot, validated from scratch. Throws NotFoundError when it has no
 * instance group: there is nothing to validate, and zeros would read as a healthy cluster.
 */
export function validationGauges(snapshot: ValidationSnapshot): Record<ValidationGauge, number> {
  return validationGaugesOf(validateCluster(snapshot), snapshot.components);
}

/** Options of {@link ValidationMetrics}. */
export interface ValidationMetricsOptions {
  clusterName: string;
  kubeConfig: KubeConfig;
  /** The process's Node watch (src/kube/shared-informer.ts); the gauges add their view of it. */
  nodes: SharedInformer<V1Node>;
  core: Pick<CoreV1Api, 'listComponentStatus'>;
  cloudGroups: CloudGroups;
  /**
   * The cloud provider's `identifiesByNodeName`: on metal, whose Nodes carry no providerID, a member
   * is the Node of its name (default false: by providerID only).
   */
  identifiesByNodeName?: boolean;
  instanceGroups: () => Promise<InstanceGroup[]>;
  /** The cluster spec, read with the instance groups; without it the label-drift gauge has no samples. */
  cluster?: () => Promise<Cluster>;
  /**
   * The key the NodeController signs managed-labels sets with, while it holds one
   * (NodeController.labelsKey): the drift gauge believes a node's managed set only as the controller
   * does. Without it (or before the key is read) no node's set is believed.
   */
  labelsKey?: () => Uint8Array | undefined;
  registry: Registry;
  /** How often the cloud groups, instance groups and component statuses are read again (default 60 s). */
  refreshIntervalMs?: number;
  /**
   * How soon a refresh that left nothing to publish (the term's first reads failed) is tried again:
   * default 5 s, doubling up to the interval, so a new leader's gauges are not absent for a whole
   * interval after a moment's cloud failure.
   */
  retryMs?: number;
  /**
   * How long each read of a refresh may take, the cloud SDK's retries included (default 30 s); a read
   * past it fails as an unreachable cloud or API server would, and the next refresh reads again.
   */
  readTimeoutMs?: number;
  /**
   * How old the inputs may be before the gauges have no samples: the Node and pod watches (default
   * {@link maxWatchStaleMs}) and the last complete refresh (default {@link maxRefreshAgeMs}).
   */
  staleAfterMs?: { watch?: number; refresh?: number };
  logger?: Logger;
}

/**
 * How long the Node or pod watch may go without a sign of being current (a list, a watch the API
 * server accepted, an event, a bookmark) before the gauges are withdrawn: two of a quiet watch's 90 s
 * reopenings.
 */
export const maxWatchStaleMs = 180_000;

/** How long the gauges keep the last cloud and state-store read while refreshes fail: ten refreshes. */
export const maxRefreshAgeMs = 600_000;

/** What the gauges read while this replica leads. */
interface Term {
  nodes: InformerCache<LabelledNodeInfo>;
  pods: Informer<V1Pod, PodInfo>;
  /** Kept from the informers' events, so a scrape reads counts instead of validating every record. */
  validation: IncrementalValidation;
}

/** What the gauges report at a scrape. */
interface Reported {
  values: Record<ValidationGauge, number>;
  groups: InstanceGroupHealth[];
}

/** The leader component keeping the `kops_*` gauges. */
export class ValidationMetrics implements LeaderComponent {
  readonly name = 'validation-metrics';
  readonly #options: ValidationMetricsOptions;
  readonly #logger: Logger;
  readonly #nodes: InformerCache<LabelledNodeInfo>;
  #term: Term | undefined;
  #slow:
    | Pick<
        ValidationSnapshot,
        'instanceGroups' | 'cloudGroups' | 'components' | 'cluster' | 'identifiesByNodeName' | 'labelsKey'
      >
    | undefined;
  /** Why the last scrape could not be validated, so it is logged once, not at every scrape. */
  #problem: string | undefined;
  /** When the last refresh completed (monotonic), the age of the cloud and state-store inputs. */
  #refreshedAt: number | undefined;
  /** The refresh's reads, each failing every minute for as long as it lasts (a refused ComponentStatus: for good). */
  readonly #failures: Record<'components' | 'inputs' | 'spec', RecurringFailureLog>;

  constructor(options: ValidationMetricsOptions) {
    this.#options = options;
    this.#logger = (options.logger ?? silentLogger).child({ component: this.name });
    const failureLog = (message: string) => new RecurringFailureLog(this.#logger, { message });
    this.#failures = {
      components: failureLog('cannot list component statuses; reporting none'),
      inputs: failureLog('cannot refresh the validation inputs; keeping the last'),
      spec: failureLog('cannot read the cluster spec; no label-drift values'),
    };
    this.#nodes = options.nodes.view('validation', labelledNodeOf);
    const registers = [options.registry];
    // Reading the counts costs the same whatever the cluster's size, so each gauge reads them; a
    // scrape calls every collect() in one turn of the event loop, so no event lands between them.
    const current = () => this.#reported();
    for (const name of Object.keys(gaugeHelp) as ValidationGauge[]) {
      new Gauge({
        name,
        help: gaugeHelp[name],
        labelNames: ['cluster_name'],
        registers,
        collect() {
          this.reset();
          const v = current()?.values[name];
          if (v !== undefined) this.set({ cluster_name: options.clusterName }, v);
        },
      });
    }
    const perGroup = (
      name: keyof typeof groupGaugeHelp,
      extraLabels: string[],
      samples: (g: InstanceGroupHealth) => [Record<string, string>, number | undefined][],
    ) =>
      new Gauge({
        name,
        help: groupGaugeHelp[name],
        labelNames: ['cluster_name', 'instance_group', ...extraLabels],
        registers,
        collect() {
          this.reset();
          for (const group of current()?.groups ?? []) {
            const labels = { cluster_name: options.clusterName, instance_group: group.instanceGroup };
            for (const [extra, v] of samples(group))
              if (v !== undefined) this.set({ ...labels, ...extra }, v);
          }
        },
      });
    perGroup('kops_instance_group_nodes', ['state'], (g) => [
      [{ state: 'ready' }, g.ready],
      [{ state: 'not_ready' }, g.notReady],
      [{ state: 'missing' }, g.missing],
    ]);
    perGroup('kops_instance_group_desired_nodes', [], (g) => [[{}, g.desired]]);
    perGroup('kops_instance_group_nodes_label_drift', [], (g) => [[{}, g.labelDrift]]);
    perGroup('kops_instance_group_nodes_needing_update', [], (g) => [[{}, g.needingUpdate]]);
  }

  /**
   * The values now, or none before the first complete read or when the cluster cannot be validated
   * (no instance group): an absent series is honest where zeros would read as "all ready". Logged
   * once per distinct reason.
   */
  #reported(): Reported | undefined {
    const term = this.#term;
    if (!term || !this.#slow || !term.nodes.hasSynced() || !term.pods.hasSynced()) return undefined;
    // The NodeController reads its key as the term starts, in parallel with the first refresh: the
    // drift counts follow the key as soon as it is held, not a refresh later (one recount a term).
    const key = this.#options.labelsKey?.();
    if (key !== this.#slow.labelsKey) {
      const { labelsKey: _, ...slow } = this.#slow;
      this.#slow = key ? { ...slow, labelsKey: key } : slow;
      term.validation.setSlowInputs(this.#slow);
    }
    let problem = this.#staleness(term);
    if (problem === undefined) {
      try {
        const values = gaugeValues(term.validation.counts(), this.#slow.components);
        if (this.#problem !== undefined) this.#logger.info('the cluster validates again; kops_* values back');
        this.#problem = undefined;
        return { values, groups: term.validation.groups() };
      } catch (err) {
        problem = describeError(err);
      }
    }
    if (problem !== this.#problem)
      this.#logger.warn({ err: problem }, 'cannot validate the cluster; no kops_* values');
    this.#problem = problem;
    return undefined;
  }

  /**
   * Why the inputs are too old to stand for the cluster now, or undefined. Counts kept from a watch
   * that no longer delivers would go on reading "all ready" however the cluster changed (kops'
   * exporter, which listed at every scrape, could not do that): past these bounds the gauges have no
   * samples, which the absent-validation alert sees, and the log says which input.
   */
  #staleness(term: Term): string | undefined {
    const watchLimit = this.#options.staleAfterMs?.watch ?? maxWatchStaleMs;
    for (const cache of [term.nodes, term.pods]) {
      const stale = cache.staleMs();
      if (stale !== undefined && stale > watchLimit) {
        return `the ${cache.name} watch has not been current for over ${Math.round(watchLimit / 1000)} s (no list, accepted watch or event)`;
      }
    }
    const refreshLimit = this.#options.staleAfterMs?.refresh ?? maxRefreshAgeMs;
    if (this.#refreshedAt !== undefined && systemClock.monotonic() - this.#refreshedAt > refreshLimit) {
      return `the cloud groups and the instance groups have not been read for over ${Math.round(refreshLimit / 1000)} s`;
    }
    return undefined;
  }

  /**
   * The cache as a full validation would read it, or undefined before the first complete read: for
   * comparing the kept counts with a validation from scratch (tests, benchmarks).
   */
  snapshot(): ValidationSnapshot | undefined {
    const term = this.#term;
    if (!term || !this.#slow || !term.nodes.hasSynced() || !term.pods.hasSynced()) return undefined;
    return { ...this.#slow, nodes: term.nodes.list(), pods: term.pods.list() };
  }

  async start(signal: AbortSignal): Promise<void> {
    const { kubeConfig, registry } = this.#options;
    const validation = new IncrementalValidation();
    // Subscribed before the pods' informer starts, so its first list reaches the counts too; the
    // shared Node cache may already be synced (it outlives a leadership term), so it is replayed.
    const follow = <R>(
      cache: InformerCache<R>,
      changed: (before: R | undefined, after: R | undefined) => void,
    ) =>
      cache.addHandlers(
        {
          add: (record) => changed(undefined, record),
          update: (before, after) => changed(before, after),
          delete: (record) => changed(record, undefined),
        },
        { replay: true },
      );
    const pods = new Informer<V1Pod, PodInfo>({
      name: 'pods-validation',
      path: '/api/v1/pods',
      kind: 'Pod',
      list: kubeList<V1Pod>(kubeConfig, '/api/v1/pods'),
      watch: kubeWatch(kubeConfig),
      transform: podInfoOf,
      registry,
      logger: this.#logger,
    });
    const term: Term = { validation, nodes: this.#nodes, pods };
    const unfollow = [
      follow(term.nodes, (b, a) => validation.nodeChanged(b, a)),
      follow(term.pods, (b, a) => validation.podChanged(b, a)),
    ];
    this.#term = term;
    term.nodes.start();
    term.pods.start();
    const interval = this.#options.refreshIntervalMs ?? 60_000;
    const retry = new Backoff({
      initialMs: Math.min(this.#options.retryMs ?? 5_000, interval),
      maxMs: interval,
    });
    try {
      while (!signal.aborted) {
        await this.#refresh(validation, signal);
        if (this.#slow) retry.reset();
        await sleep(systemClock, this.#slow ? interval : Math.min(retry.next(), interval), signal);
      }
    } finally {
      this.#term = undefined;
      this.#slow = undefined;
      this.#refreshedAt = undefined;
      this.#problem = undefined;
      for (const stop of unfollow) stop();
      await Promise.all([term.nodes.stop(), term.pods.stop()]);
    }
  }

  /**
   * Reads what the watches do not cover. A failure to read the cloud or the instance groups keeps the
   * previous values (logged). ComponentStatus is deprecated and some API servers refuse it, so a
   * failure there only empties the component gauges' inputs; the node and pod gauges carry on.
   *
   * Each read has a deadline ({@link ValidationMetricsOptions.readTimeoutMs}), and the refresh returns
   * as soon as `signal` aborts, whatever the reads are waiting on (an API brownout that costs the lease
   * slows them too): leadership ended, so it publishes nothing from reads cut short. The component
   * statuses' request is cancelled; the cloud's and the state store's calls take no signal, so they
   * run on to their own end and their answers are dropped.
   */
  async #refresh(validation: IncrementalValidation, signal: AbortSignal): Promise<void> {
    const { cloudGroups, clusterName, core, instanceGroups, cluster } = this.#options;
    const ms = this.#options.readTimeoutMs ?? validationReadTimeoutMs;
    const [groups, igs, statuses, spec] = await Promise.allSettled([
      bounded(() => cloudGroups.list(clusterName), ms, 'list the cloud groups', signal),
      bounded(() => instanceGroups(), ms, 'read the instance groups', signal),
      bounded(
        (cut) => core.listComponentStatus({}, abortingWith(cut)),
        ms,
        'list the component statuses',
        signal,
      ),
      cluster ? bounded(() => cluster(), ms, 'read the cluster spec', signal) : Promise.resolve(undefined),
    ]);
    if (signal.aborted) return;
    let components: ValidationSnapshot['components'] = [];
    if (statuses.status === 'fulfilled') {
      components = statuses.value.items.map((c: V1ComponentStatus) => ({
        name: c.metadata?.name ?? '',
        healthy: (c.conditions ?? []).every((condition) => condition.status === 'True'),
      }));
      this.#failures.components.succeeded();
    } else {
      this.#failures.components.failed(fromApiException(statuses.reason, 'list the component statuses'));
    }
    if (groups.status === 'rejected' || igs.status === 'rejected') {
      this.#failures.inputs.failed(
        groups.status === 'rejected' ? groups.reason : (igs as PromiseRejectedResult).reason,
      );
      if (this.#slow) this.#slow = { ...this.#slow, components };
      return;
    }
    this.#failures.inputs.succeeded();
    // Without the cluster spec there is no desired label to compare with: the drift gauge goes absent
    // (logged) rather than keeping a count computed against an older spec.
    if (spec.status === 'rejected') this.#failures.spec.failed(spec.reason);
    else this.#failures.spec.succeeded();
    const clusterSpec = spec.status === 'fulfilled' ? spec.value : undefined;
    const labelsKey = this.#options.labelsKey?.();
    this.#slow = {
      cloudGroups: groups.value,
      instanceGroups: igs.value,
      components,
      ...(clusterSpec ? { cluster: clusterSpec } : {}),
      ...(this.#options.identifiesByNodeName ? { identifiesByNodeName: true } : {}),
      ...(labelsKey ? { labelsKey } : {}),
    };
    validation.setSlowInputs(this.#slow);
    this.#refreshedAt = systemClock.monotonic();
  }
}

/** A Node as the gauges read it: validation's view, its managed set as signed, kops' needs-update mark. */
export function labelledNodeOf(node: V1Node): LabelledNodeInfo {
  // Annotations as the API server sent them: ones that are not a map (`in` would throw on a string,
  // and the Node would drop out of every count) say nothing, and only string values are believed.
  const annotations = fieldsOf(node.metadata?.annotations);
  const managed = annotations[managedLabelsAnnotation];
  const signature = annotations[managedLabelsSignatureAnnotation];
  const uid = node.metadata?.uid;
  return {
    ...nodeInfoOf(node),
    ...(typeof uid === 'string' && uid ? { uid } : {}),
    ...(typeof managed === 'string' ? { managedLabels: managed } : {}),
    ...(typeof signature === 'string' ? { managedLabelsSignature: signature } : {}),
    ...(Object.hasOwn(annotations, needsUpdateAnnotation) ? { needsUpdate: true } : {}),
  };
}
