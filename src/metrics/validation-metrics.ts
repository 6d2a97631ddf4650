/**
 * The MetricsServer of seed 001: the result of `kops validate cluster` as the eight `kops_*` gauges
 * (label `cluster_name`), served on the controller's `/metrics`. A scrape costs no API or cloud call:
 * Nodes and pods come from watches, and the cloud's groups, the instance groups and the component
 * statuses from a background refresh (every minute by default). Runs on the leader only, so one
 * replica reports; the gauges have no samples until the first refresh, and none on other replicas.
 */
import type { CoreV1Api, KubeConfig, V1ComponentStatus, V1Node, V1Pod } from '@kubernetes/client-node';
import { Gauge, type Registry } from 'prom-client';
import type { CloudGroup, CloudGroups } from '../cloud/types.ts';
import { describeError } from '../errors.ts';
import { sleep, systemClock } from '../kube/clock.ts';
import { Informer, kubeList, kubeWatch } from '../kube/informer.ts';
import { type Logger, silentLogger } from '../log.ts';
import { managedLabelsAnnotation, parseManagedLabels } from '../nodelabels/diff-labels.ts';
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
import {
  type InstanceGroupHealth,
  instanceGroupHealth,
  type LabelledNodeInfo,
} from './instance-group-health.ts';

/** The eight gauges, with seed 001's help texts. */
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
 * size and the drift are separate names because they are not states of a node.
 */
const groupGaugeHelp = {
  kops_instance_group_nodes:
    'Nodes of the instance group by state: ready, not_ready, or missing (desired minus the nodes present).',
  kops_instance_group_desired_nodes:
    "Desired size of the instance group: its cloud group's target size, else the spec's minSize.",
  kops_instance_group_nodes_label_drift:
    'Nodes of the instance group whose labels differ from the labels its spec asks for.',
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
}

/** Everything one scrape reports. */
interface Computed {
  values: Record<ValidationGauge, number>;
  groups: InstanceGroupHealth[];
}

/**
 * The gauge values for a validation result, counted from its typed failures and nodes — never from
 * the wording of a message: the nodes validation checked, Ready or not (kops' readiness), plus the
 * machines expected to join that have not; critical pods pending, of unknown phase, and one per
 * unready container (as kops' exporter counted); control-plane static pods missing, counted once per
 * component.
 */
export function validationGaugesOf(
  result: ValidationResult,
  components: ValidationSnapshot['components'],
): Record<ValidationGauge, number> {
  const count = (reason: FailureReason) => result.failures.filter((f) => f.reason === reason).length;
  const ready = result.nodes.filter((n) => n.ready).length;
  return {
    kops_component_healthy: components.filter((c) => c.healthy).length,
    kops_component_unhealthy: components.filter((c) => !c.healthy).length,
    kops_node_ready: ready,
    kops_node_notReady: result.nodes.length - ready + count('machine-not-joined'),
    kops_pod_missing: new Set(
      result.failures.filter((f) => f.reason === 'static-pod-missing').map((f) => f.app),
    ).size,
    kops_pod_notReady: result.failures.reduce((sum, f) => sum + (f.notReadyContainers?.length ?? 0), 0),
    kops_pod_pending: count('pod-pending'),
    kops_pod_unknown: count('pod-unknown-phase'),
  };
}

/**
 * The gauge values for a snapshot. Throws NotFoundError when it has no instance group: there is
 * nothing to validate, and zeros would read as a healthy cluster.
 */
export function validationGauges(snapshot: ValidationSnapshot): Record<ValidationGauge, number> {
  return validationGaugesOf(validateCluster(snapshot), snapshot.components);
}

/** Options of {@link ValidationMetrics}. */
export interface ValidationMetricsOptions {
  clusterName: string;
  kubeConfig: KubeConfig;
  core: Pick<CoreV1Api, 'listComponentStatus'>;
  cloudGroups: CloudGroups;
  instanceGroups: () => Promise<InstanceGroup[]>;
  /** The cluster spec, read with the instance groups; without it the label-drift gauge has no samples. */
  cluster?: () => Promise<Cluster>;
  registry: Registry;
  /** How often the cloud groups, instance groups and component statuses are read again (default 60 s). */
  refreshIntervalMs?: number;
  logger?: Logger;
}

/** The leader component keeping the `kops_*` gauges. */
export class ValidationMetrics implements LeaderComponent {
  readonly name = 'validation-metrics';
  readonly #options: ValidationMetricsOptions;
  readonly #logger: Logger;
  #current: { nodes: Informer<V1Node, LabelledNodeInfo>; pods: Informer<V1Pod, PodInfo> } | undefined;
  #slow: Pick<ValidationSnapshot, 'instanceGroups' | 'cloudGroups' | 'components' | 'cluster'> | undefined;
  /** Why the last snapshot could not be validated, so it is logged once, not at every scrape. */
  #problem: string | undefined;

  constructor(options: ValidationMetricsOptions) {
    this.#options = options;
    this.#logger = (options.logger ?? silentLogger).child({ component: this.name });
    const registers = [options.registry];
    // One scrape collects all the gauges: validate once for them, not once each.
    let computed: { at: number; result: Computed | undefined } | undefined;
    const current = (): Computed | undefined => {
      if (!computed || Date.now() - computed.at > 1000) {
        const snapshot = this.snapshot();
        computed = snapshot ? { at: Date.now(), result: this.#gauges(snapshot) } : undefined;
      }
      return computed?.result;
    };
    const value = (gauge: ValidationGauge) => () => current()?.values[gauge];
    for (const name of Object.keys(gaugeHelp) as ValidationGauge[]) {
      const compute = value(name);
      new Gauge({
        name,
        help: gaugeHelp[name],
        labelNames: ['cluster_name'],
        registers,
        collect() {
          this.reset();
          const v = compute();
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
  }

  /**
   * The values for a snapshot, or none when it cannot be validated (no instance group): an absent
   * series is honest where zeros would read as "all ready". Logged once per distinct reason.
   */
  #gauges(snapshot: ValidationSnapshot): Computed | undefined {
    try {
      const values = validationGauges(snapshot);
      this.#problem = undefined;
      return { values, groups: instanceGroupHealth(snapshot) };
    } catch (err) {
      const problem = describeError(err);
      if (problem !== this.#problem)
        this.#logger.warn({ err: problem }, 'cannot validate the cluster; no kops_* values');
      this.#problem = problem;
      return undefined;
    }
  }

  /** What the gauges would be computed from now, or undefined before the first complete read. */
  snapshot(): ValidationSnapshot | undefined {
    const current = this.#current;
    if (!current || !this.#slow || !current.nodes.hasSynced() || !current.pods.hasSynced()) return undefined;
    return { ...this.#slow, nodes: current.nodes.list(), pods: current.pods.list() };
  }

  async start(signal: AbortSignal): Promise<void> {
    const { kubeConfig, registry } = this.#options;
    const informer = <T extends V1Node | V1Pod, R>(name: string, path: string, transform: (o: T) => R) =>
      new Informer<T, R>({
        name,
        path,
        list: kubeList<T>(kubeConfig, path),
        watch: kubeWatch(kubeConfig),
        transform,
        registry,
        logger: this.#logger,
      });
    const current = {
      nodes: informer<V1Node, LabelledNodeInfo>('nodes-validation', '/api/v1/nodes', (node) => ({
        ...nodeInfoOf(node),
        managedLabels: parseManagedLabels(node.metadata?.annotations?.[managedLabelsAnnotation]),
      })),
      pods: informer<V1Pod, PodInfo>('pods-validation', '/api/v1/pods', podInfoOf),
    };
    this.#current = current;
    current.nodes.start();
    current.pods.start();
    const interval = this.#options.refreshIntervalMs ?? 60_000;
    try {
      while (!signal.aborted) {
        await this.#refresh();
        await sleep(systemClock, interval, signal);
      }
    } finally {
      this.#current = undefined;
      this.#slow = undefined;
      await Promise.all([current.nodes.stop(), current.pods.stop()]);
    }
  }

  /**
   * Reads what the watches do not cover. A failure to read the cloud or the instance groups keeps the
   * previous values (logged). ComponentStatus is deprecated and some API servers refuse it, so a
   * failure there only empties the component gauges' inputs; the node and pod gauges carry on.
   */
  async #refresh(): Promise<void> {
    const { cloudGroups, clusterName, core, instanceGroups, cluster } = this.#options;
    const [groups, igs, statuses, spec] = await Promise.allSettled([
      cloudGroups.list(clusterName),
      instanceGroups(),
      core.listComponentStatus(),
      cluster ? cluster() : Promise.resolve(undefined),
    ]);
    let components: ValidationSnapshot['components'] = [];
    if (statuses.status === 'fulfilled') {
      components = statuses.value.items.map((c: V1ComponentStatus) => ({
        name: c.metadata?.name ?? '',
        healthy: (c.conditions ?? []).every((condition) => condition.status === 'True'),
      }));
    } else {
      this.#logger.warn(
        { err: describeError(statuses.reason) },
        'cannot list component statuses; reporting none',
      );
    }
    if (groups.status === 'rejected' || igs.status === 'rejected') {
      const reason = groups.status === 'rejected' ? groups.reason : (igs as PromiseRejectedResult).reason;
      this.#logger.warn(
        { err: describeError(reason) },
        'cannot refresh the validation inputs; keeping the last',
      );
      if (this.#slow) this.#slow = { ...this.#slow, components };
      return;
    }
    // Without the cluster spec there is no desired label to compare with: the drift gauge goes absent
    // (logged) rather than keeping a count computed against an older spec.
    if (spec.status === 'rejected') {
      this.#logger.warn(
        { err: describeError(spec.reason) },
        'cannot read the cluster spec; no label-drift values',
      );
    }
    const clusterSpec = spec.status === 'fulfilled' ? spec.value : undefined;
    this.#slow = {
      cloudGroups: groups.value,
      instanceGroups: igs.value,
      components,
      ...(clusterSpec ? { cluster: clusterSpec } : {}),
    };
  }
}
