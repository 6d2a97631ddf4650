/**
 * The NodeController (kops' core job): every Node gets the labels of its instance group. The instance
 * group comes from the cloud's record of the node's instance (never from the node), its definition from
 * the state store; the controller sets what is missing, removes what it applied earlier and is no longer
 * desired (recorded in an annotation, so labels set by anyone else are never touched), and does both in
 * one strategic-merge patch. Unlike kops it re-reads instance groups: an edited group relabels its nodes
 * within the state store's poll interval.
 *
 * Scale: the informer keeps slim records; a status heartbeat does not trigger a reconcile; nodes are
 * identified ahead of processing as their events arrive, so the identifier's coalescing turns a
 * cluster-wide resync into a handful of cloud calls.
 */
import { CoreV1Api, type KubeConfig, type V1Node } from '@kubernetes/client-node';
import { Counter, type Registry, register } from 'prom-client';
import { isCloudVerdict } from '../../bootstrap/dependency.ts';
import { capiInstanceGroup } from '../../cloud/capi/instance-group.ts';
import type { IdentifyResult, NodeIdentifier } from '../../cloud/types.ts';
import { describeError, NotFoundError } from '../../errors.ts';
import { reuseConnections } from '../../kube/connection-reuse.ts';
import { runController } from '../../kube/controller.ts';
import type { InformerCache } from '../../kube/informer.ts';
import { type KubeHttps, kubeHttps } from '../../kube/kube-https.ts';
import { sharedMetric } from '../../kube/metrics.ts';
import { metadataPatch, patchNode, patchTimeoutMs } from '../../kube/patch.ts';
import type { SharedInformer } from '../../kube/shared-informer.ts';
import { type Logger, silentLogger } from '../../log.ts';
import { buildNodeLabels, type LabelFeatures } from '../../nodelabels/build-node-labels.ts';
import {
  diffLabels,
  formatManagedLabels,
  isEmptyDiff,
  managedLabelsAnnotation,
  parseManagedLabels,
} from '../../nodelabels/diff-labels.ts';
import type { LeaderComponent } from '../../runtime/controller-runtime.ts';
import type { ClusterStore } from '../../statestore/cluster-store.ts';
import type { InstanceGroup } from '../../statestore/kops-types.ts';
import { createEvent, nodeEvent } from './node-event.ts';
import { type NodeRecord, needsReconcile, nodeRecordOf } from './node-record.ts';

/** The Event reason of a node whose identity the cloud refused (another cluster's or a stopped instance). */
export const identityRejectedReason = 'IdentityRejected';

/** How one reconcile ended, the `result` label of `node_controller_reconciles_total`. */
export type ReconcileResult = 'labelled' | 'unchanged' | 'rejected' | 'skipped' | 'deleted' | 'error';

/** Options of a {@link NodeController}. */
export interface NodeControllerOptions {
  kubeConfig: KubeConfig;
  /** The process's Node watch (src/kube/shared-informer.ts); the controller adds its view of it. */
  nodes: SharedInformer<V1Node>;
  identifier: NodeIdentifier;
  /** The cluster's state store; the controller starts and stops its polling while it leads. */
  clusterStore: ClusterStore;
  /** Identify nodes without a providerID by name (metal, whose inventory lists host names). */
  identifyByNodeName?: boolean;
  /** The kops feature flags that change labels (`KOPS_FEATURE_FLAGS`, e.g. `+APIServerNodes`). */
  labelFeatures?: LabelFeatures;
  /**
   * Cluster API mode: the MachineDeployments that stand for instance groups the state store does not
   * list (kops gives their nodes the Node role).
   */
  capiDeployments?: { hasDeployment(name: string): boolean };
  /** Nodes reconciled at once (default 16). */
  concurrency?: number;
  /** When a refused node is checked again, in ms (default 5 min: a stopped instance may be started). */
  rejectionRetryMs?: number;
  /** The longest retry delay of a failing node, in ms (default 5 min). */
  maxRetryDelayMs?: number;
  /** Where the controller's, its informer's and its queue's metrics go (default: prom-client's). */
  registry?: Registry;
  logger?: Logger;
}

interface NodeControllerMetrics {
  reconciles: Counter;
  labelsSet: Counter;
  labelsRemoved: Counter;
}

function nodeControllerMetrics(registry: Registry): NodeControllerMetrics {
  const registers = [registry];
  const counter = (name: string, help: string, labelNames: string[] = []) =>
    sharedMetric(registry, name, () => new Counter({ name, help, labelNames, registers }));
  return {
    reconciles: counter('node_controller_reconciles_total', 'Node reconciles, by result.', ['result']),
    labelsSet: counter('node_controller_labels_applied_total', 'Node labels added or changed.'),
    labelsRemoved: counter('node_controller_labels_removed_total', 'Managed node labels removed.'),
  };
}

/** One leadership term: the Node cache and what was learnt about nodes. */
interface Term {
  informer: InformerCache<NodeRecord>;
  /** Identifications started as events arrived, handed to the reconcile of that node. */
  prefetched: Map<string, { key: string; result: Promise<Map<string, IdentifyResult>> }>;
  /** The instance group each node was last labelled from, to requeue a group's nodes on a change. */
  groupOf: Map<string, string>;
  /** The refusal last announced per node, so a persisting refusal makes one Event, not one per retry. */
  refusals: Map<string, string>;
}

/**
 * `work`, or the signal's reason as soon as it aborts: the calls a reconcile waits on take no signal
 * (the cloud identifier, the state store, the Event create), so they run on and their results are
 * dropped; nothing from them is recorded once the reconcile has given up. No deadline (as
 * `bounded` of src/deadline.ts would add): in a label storm a node's lookup waits its turn in the
 * cloud's call budget for as long as the storm needs, and each call bounds itself (SDK retries,
 * the state store's and the API server's deadlines).
 */
function untilAborted<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) {
    work.catch(() => undefined);
    return Promise.reject(signal.reason);
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (err: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(err);
      },
    );
  });
}

/** The NodeController, run by the controller runtime on the leader only. */
export class NodeController implements LeaderComponent {
  readonly name = 'node-controller';
  readonly #options: NodeControllerOptions;
  readonly #core: CoreV1Api;
  /** Node patches go over the pooled client: an edit or a first start patches a whole group (src/kube/patch.ts). */
  readonly #kube: KubeHttps;
  readonly #logger: Logger;
  readonly #registry: Registry;
  readonly #metrics: NodeControllerMetrics;
  readonly #nodes: InformerCache<NodeRecord>;

  constructor(options: NodeControllerOptions) {
    this.#options = options;
    this.#nodes = options.nodes.view('node-controller', nodeRecordOf);
    this.#core = reuseConnections(options.kubeConfig).makeApiClient(CoreV1Api);
    this.#kube = kubeHttps(options.kubeConfig, { timeoutMs: patchTimeoutMs });
    this.#logger = (options.logger ?? silentLogger).child({ controller: 'node' });
    this.#registry = options.registry ?? register;
    this.#metrics = nodeControllerMetrics(this.#registry);
  }

  /** Follows the Node cache and labels Nodes until `signal` aborts. */
  async start(signal: AbortSignal): Promise<void> {
    const registry = this.#registry;
    const term: Term = {
      informer: this.#nodes,
      prefetched: new Map(),
      groupOf: new Map(),
      refusals: new Map(),
    };
    await runController(
      {
        name: 'nodes',
        informer: term.informer,
        key: (node) => node.name,
        track: {
          delete: (node) => {
            term.prefetched.delete(node.name);
            term.groupOf.delete(node.name);
            term.refusals.delete(node.name);
          },
        },
        // A status heartbeat changes nothing the labels depend on.
        filter: (node, before) => !before || needsReconcile(before, node),
        onQueue: (node) => this.#prefetch(term, node),
        reconcile: async (name, workSignal) => {
          const outcome = await this.#reconcile(term, name, workSignal);
          if (outcome !== 'rejected') return { outcome };
          return { outcome, requeueAfterMs: this.#options.rejectionRetryMs ?? 300_000 };
        },
        watch: (enqueue) => this.#watchClusterStore(term, enqueue),
        concurrency: this.#options.concurrency ?? 16,
        baseDelayMs: 500,
        maxDelayMs: this.#options.maxRetryDelayMs ?? 300_000,
        reconciles: this.#metrics.reconciles,
        registry,
        logger: this.#logger,
      },
      signal,
    );
  }

  /** Polls the state store while leading, and requeues the nodes an edited group or cluster affects. */
  #watchClusterStore(term: Term, enqueue: (node: NodeRecord) => void): () => void {
    const { clusterStore } = this.#options;
    const { informer } = term;
    const onInstanceGroup = (ig: InstanceGroup) => {
      const name = ig.metadata.name;
      let requeued = 0;
      for (const [node, group] of term.groupOf) {
        const record = group === name ? informer.get(node) : undefined;
        if (record) {
          enqueue(record);
          requeued++;
        }
      }
      this.#logger.info({ instanceGroup: name, nodes: requeued }, 'instance group changed; relabelling');
    };
    const onCluster = () => {
      for (const record of informer.list()) enqueue(record);
      this.#logger.info({ nodes: informer.size }, 'cluster spec changed; relabelling every node');
    };
    clusterStore.on('instanceGroup', onInstanceGroup);
    clusterStore.on('cluster', onCluster);
    clusterStore.start();
    return () => {
      clusterStore.off('instanceGroup', onInstanceGroup);
      clusterStore.off('cluster', onCluster);
      clusterStore.stop();
    };
  }

  /** The key a node is identified by: its providerID, or its name where the cloud knows hosts by name. */
  #identityKey(node: NodeRecord): string | undefined {
    if (node.providerID) return node.providerID;
    return this.#options.identifyByNodeName ? node.name : undefined;
  }

  /** Starts a queued node's identification now, so that nodes queued together share cloud calls. */
  #prefetch(term: Term, node: NodeRecord): void {
    const key = this.#identityKey(node);
    if (key !== undefined && term.prefetched.get(node.name)?.key !== key) {
      const result = this.#options.identifier.identify([key]);
      // Rejections are seen (and reported) by the reconcile that takes this promise over.
      result.catch(() => undefined);
      term.prefetched.set(node.name, { key, result });
    }
  }

  async #identify(
    term: Term,
    name: string,
    key: string,
    signal: AbortSignal,
  ): Promise<IdentifyResult | undefined> {
    const prefetched = term.prefetched.get(name);
    term.prefetched.delete(name);
    const results = await untilAborted(
      prefetched?.key === key ? prefetched.result : this.#options.identifier.identify([key]),
      signal,
    );
    return results.get(key);
  }

  /**
   * Labels one node. Every wait gives up as soon as `signal` aborts (the controller stopping when
   * leadership ends, within the runtime's stop budget, however slow the cloud, the state store or the
   * API server are): the reconcile then throws before it has changed anything, or with its one patch
   * sent whole or not at all.
   */
  async #reconcile(term: Term, name: string, signal: AbortSignal): Promise<ReconcileResult> {
    const node = term.informer.get(name);
    if (!node) return 'deleted';
    const key = this.#identityKey(node);
    if (key === undefined) {
      // The update that sets the providerID queues the node again.
      this.#logger.debug({ node: name }, 'no providerID yet; waiting for it');
      return 'skipped';
    }
    const identified = await this.#identify(term, name, key, signal);
    if (!identified) throw new NotFoundError(`the identifier returned nothing for ${key}`);
    if (!identified.ok) {
      // Only the cloud's verdict on the instance rejects the node; anything else, the cloud refusing
      // the controller's own call included, is retried with backoff.
      if (!isCloudVerdict(identified.error)) throw identified.error;
      await this.#reject(term, node, identified.error, signal);
      return 'rejected';
    }
    const { identity } = identified;
    const { clusterStore } = this.#options;
    const [cluster, ig] = await untilAborted(
      Promise.all([
        clusterStore.cluster(),
        clusterStore.instanceGroup(identity.instanceGroup).catch((err: unknown) => {
          if (
            err instanceof NotFoundError &&
            this.#options.capiDeployments?.hasDeployment(identity.instanceGroup)
          )
            return capiInstanceGroup(identity.instanceGroup);
          throw err;
        }),
      ]),
      signal,
    );
    term.groupOf.set(name, identity.instanceGroup);
    term.refusals.delete(name);
    // The instance group's labels win over what the cloud implies, as its nodeLabels win in kops.
    const desired = { ...identity.cloudLabels, ...buildNodeLabels(cluster, ig, this.#options.labelFeatures) };
    const diff = diffLabels(node.labels, desired, parseManagedLabels(node.managedLabels));
    const managed = formatManagedLabels(diff.managed);
    if (isEmptyDiff(diff) && node.managedLabels === managed) return 'unchanged';
    try {
      await patchNode(
        this.#kube,
        name,
        metadataPatch({
          labels: { set: diff.set, remove: diff.remove },
          annotations: { set: { [managedLabelsAnnotation]: managed } },
        }),
        'strategic-merge',
        { signal },
      );
    } catch (err) {
      if (err instanceof NotFoundError) return 'deleted';
      throw err;
    }
    const set = Object.keys(diff.set);
    this.#metrics.labelsSet.inc(set.length);
    this.#metrics.labelsRemoved.inc(diff.remove.length);
    this.#logger.info(
      { node: name, instanceGroup: identity.instanceGroup, set, removed: diff.remove },
      'labelled node',
    );
    return 'labelled';
  }

  /**
   * A node the cloud refuses (another cluster's instance, a stopped one, a bad providerID) gets no
   * labels; it is reported once as a Warning Event and a log line, and checked again only after the
   * rejection delay (the `rejected` outcome requeues it), so a spoofing node cannot make the controller
   * loop on the cloud API.
   */
  async #reject(term: Term, node: NodeRecord, error: Error, signal: AbortSignal): Promise<void> {
    const message = `not labelling node: ${describeError(error)}`;
    if (term.refusals.get(node.name) === message) return;
    this.#logger.warn({ node: node.name, providerID: node.providerID, err: message }, 'identity rejected');
    await untilAborted(
      createEvent(this.#core, nodeEvent(node, 'Warning', identityRejectedReason, message, new Date())),
      signal,
    );
    term.refusals.set(node.name, message);
  }
}
