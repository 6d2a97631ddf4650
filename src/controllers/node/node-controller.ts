/**
 * The NodeController (kops' core job): every Node gets the labels of its instance group. The instance
 * group comes from the cloud's record of the node's instance (never from the node), its definition from
 * the state store; the controller sets what is missing, removes what it applied earlier and is no longer
 * desired (recorded in an annotation, so labels set by anyone else are never touched), and does both in
 * one strategic-merge patch. Unlike kops it re-reads instance groups: an edited group relabels its nodes
 * within the state store's poll interval.
 *
 * Trust: the annotation is on the Node, which its kubelet may write, so the recorded set is pruned from
 * only when its signature (HMAC under a key in a Secret only the controller reads, labels-key.ts) is
 * the controller's for that node. The key is read once per leadership term; while it cannot be read
 * the controller still adds labels but prunes nothing but kops' role labels, and remembers what it set
 * so that it can record (and later prune) it once the key is back.
 *
 * Scale: the informer keeps slim records; a status heartbeat does not trigger a reconcile; nodes are
 * identified ahead of processing as their events arrive, and as their retries and re-checks come due,
 * so the identifier's coalescing turns a cluster-wide resync, or thousands of refused nodes re-checked,
 * into a handful of cloud calls. Re-checks wait behind new nodes (the work queue's second line), and a
 * refusal that persists is checked less and less often (5 minutes doubling to an hour).
 */
import type { KubeConfig, V1Node } from '@kubernetes/client-node';
import { Counter, Gauge, type Registry, register } from 'prom-client';
import { isCloudVerdict } from '../../bootstrap/dependency.ts';
import { capiInstanceGroup } from '../../cloud/capi/instance-group.ts';
import type { IdentifyResult, NodeIdentifier } from '../../cloud/types.ts';
import { untilAborted } from '../../deadline.ts';
import { describeError, NotFoundError } from '../../errors.ts';
import { runController } from '../../kube/controller.ts';
import type { InformerCache } from '../../kube/informer.ts';
import { type KubeHttps, kubeHttps } from '../../kube/kube-https.ts';
import { sharedMetric } from '../../kube/metrics.ts';
import { isUidMismatch, metadataPatch, patchNode, patchTimeoutMs } from '../../kube/patch.ts';
import type { SharedInformer } from '../../kube/shared-informer.ts';
import { type Logger, silentLogger } from '../../log.ts';
import { buildNodeLabels, type LabelFeatures } from '../../nodelabels/build-node-labels.ts';
import { isEmptyPlan, planNodeLabels } from '../../nodelabels/signed-managed-labels.ts';
import type { Clock } from '../../runtime/clock.ts';
import type { LeaderComponent } from '../../runtime/controller-runtime.ts';
import type { ClusterStore } from '../../statestore/cluster-store.ts';
import type { InstanceGroup } from '../../statestore/kops-types.ts';
import { labelsKeySecretName, loadLabelsKey, TermLabelsKey } from './labels-key.ts';
import { eventNameKey } from './node-event.ts';
import { type NodeEventRecorder, sharedNodeEventRecorder } from './node-event-recorder.ts';
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
  /**
   * When a refused node is checked again, in ms (default 5 min: a stopped instance may be started);
   * each refusal in a row doubles it, up to `maxRejectionRetryMs`, until the Node changes.
   */
  rejectionRetryMs?: number;
  /** The longest wait between checks of a node refused again and again, in ms (default 1 h). */
  maxRejectionRetryMs?: number;
  /** The longest retry delay of a failing node, in ms (default 5 min). */
  maxRetryDelayMs?: number;
  /**
   * The namespace of the Secret holding the key that signs the managed-labels annotation
   * (`kops-controller-labels-key`); default `kube-system`. `run` passes `leaderElection.namespace`.
   */
  labelsKeyNamespace?: string;
  /** Delays between failed reads of that Secret, in ms (default 1 s doubling to 5 min). */
  labelsKeyBackoff?: { initialMs: number; maxMs: number };
  /** Where the controller's, its informer's and its queue's metrics go (default: prom-client's). */
  registry?: Registry;
  /** The work queue's clock, for its retry and re-check delays (tests move it). */
  clock?: Clock;
  /**
   * Writes its Events (default: the recorder shared by the controllers built from `kubeConfig`, so
   * that they share one write rate and one memory of what was written).
   */
  events?: NodeEventRecorder;
  logger?: Logger;
}

/** Refusals logged at warn per leadership term; the rest at debug, after one line that says so. */
export const maxRefusalLinesPerTerm = 50;

/**
 * The wait before the next check of a node the cloud has refused `refusals` times in a row: `firstMs`
 * doubling to `maxMs`. A permanent refusal (another cluster's instance, a terminated one) then costs a
 * lookup an hour, while a stopped instance that is started again is labelled within the hour, or at
 * once when its Node changes.
 */
export function recheckDelayMs(refusals: number, firstMs: number, maxMs: number): number {
  return Math.min(maxMs, firstMs * 2 ** Math.max(0, refusals - 1));
}

interface NodeControllerMetrics {
  reconciles: Counter;
  labelsSet: Counter;
  labelsRemoved: Counter;
  untrusted: Counter;
  keyUnavailable: Gauge;
}

function nodeControllerMetrics(registry: Registry): NodeControllerMetrics {
  const registers = [registry];
  const counter = (name: string, help: string, labelNames: string[] = []) =>
    sharedMetric(registry, name, () => new Counter({ name, help, labelNames, registers }));
  return {
    reconciles: counter('node_controller_reconciles_total', 'Node reconciles, by result.', ['result']),
    labelsSet: counter('node_controller_labels_applied_total', 'Node labels added or changed.'),
    labelsRemoved: counter('node_controller_labels_removed_total', 'Managed node labels removed.'),
    untrusted: counter(
      'node_controller_managed_labels_untrusted_total',
      'Managed-labels annotations ignored (nothing pruned from them, rewritten signed), by reason: unsigned, invalid.',
      ['reason'],
    ),
    keyUnavailable: sharedMetric(
      registry,
      'node_controller_labels_key_unavailable',
      () =>
        new Gauge({
          name: 'node_controller_labels_key_unavailable',
          help: '1 while the leader labels without its signing key: labels are added, only kops role labels pruned.',
          registers,
        }),
    ),
  };
}

/** One leadership term: the Node cache and what was learnt about nodes. */
interface Term {
  informer: InformerCache<NodeRecord>;
  /** Identifications started as events arrived, handed to the reconcile of that node. */
  prefetched: Map<string, { key: string; result: Promise<Map<string, IdentifyResult>> }>;
  /** The instance group each node was last labelled from, to requeue a group's nodes on a change. */
  groupOf: Map<string, string>;
  /** The refusal last logged per node, so a persisting refusal makes one line per term, not one per check. */
  refusals: Map<string, string>;
  /** Refusal lines written at warn this term ({@link maxRefusalLinesPerTerm}). */
  refusalLines: number;
  /** How many times in a row each node was refused since its Node last changed: its re-check backs off. */
  refusedInARow: Map<string, number>;
  /** The key that signs the managed-labels annotation, read once for the term. */
  key: TermLabelsKey;
  /**
   * Nodes labelled while the key could not be read, with the keys the controller itself desired on
   * them then: its own record (never node data) of what to sign, or prune, once the key is back.
   */
  unsigned: Map<string, Set<string>>;
  /** Queues a node (set once the runner starts). */
  enqueue: (node: NodeRecord) => void;
}

/** The NodeController, run by the controller runtime on the leader only. */
export class NodeController implements LeaderComponent {
  readonly name = 'node-controller';
  readonly #options: NodeControllerOptions;
  readonly #events: NodeEventRecorder;
  #eventNameKey: { from: Uint8Array; key: Uint8Array } | undefined;
  /** Node patches go over the pooled client: an edit or a first start patches a whole group (src/kube/patch.ts). */
  readonly #kube: KubeHttps;
  readonly #logger: Logger;
  readonly #registry: Registry;
  readonly #metrics: NodeControllerMetrics;
  readonly #nodes: InformerCache<NodeRecord>;
  #term: Term | undefined;

  constructor(options: NodeControllerOptions) {
    this.#options = options;
    this.#nodes = options.nodes.view('node-controller', nodeRecordOf);
    this.#kube = kubeHttps(options.kubeConfig, { timeoutMs: patchTimeoutMs });
    this.#logger = (options.logger ?? silentLogger).child({ controller: 'node' });
    this.#registry = options.registry ?? register;
    this.#metrics = nodeControllerMetrics(this.#registry);
    this.#events =
      options.events ??
      sharedNodeEventRecorder(options.kubeConfig, {
        registry: this.#registry,
        logger: options.logger ?? silentLogger,
        nameKey: () => this.eventNameKey(),
      });
  }

  /**
   * The key that signs managed-labels sets while this leader holds it (undefined before it is read,
   * after a failed read, and between terms): the drift gauge believes a node's set only as this
   * controller does.
   */
  get labelsKey(): Uint8Array | undefined {
    return this.#term?.key.current;
  }

  /**
   * The key the Events' names are made with, from the term's labels key (node-event.ts
   * eventNameKey), once its first read has settled: so that a leader finds another's Event of the
   * same report rather than write one under a random name. Undefined between terms and while the
   * Secret cannot be read.
   */
  async eventNameKey(): Promise<Uint8Array | undefined> {
    const key = await this.#term?.key.ready();
    if (!key) return undefined;
    if (this.#eventNameKey?.from !== key) this.#eventNameKey = { from: key, key: eventNameKey(key) };
    return this.#eventNameKey.key;
  }

  /** Follows the Node cache and labels Nodes until `signal` aborts. */
  async start(signal: AbortSignal): Promise<void> {
    const keyStop = new AbortController();
    const stopKey = () => keyStop.abort(signal.reason);
    signal.addEventListener('abort', stopKey, { once: true });
    const term: Term = {
      informer: this.#nodes,
      prefetched: new Map(),
      groupOf: new Map(),
      refusals: new Map(),
      refusalLines: 0,
      refusedInARow: new Map(),
      key: this.#termKey(keyStop.signal, () => term),
      unsigned: new Map(),
      enqueue: () => undefined,
    };
    this.#term = term;
    try {
      await this.#run(term, signal);
    } finally {
      this.#term = undefined;
      signal.removeEventListener('abort', stopKey);
      keyStop.abort();
      await term.key.done;
      this.#metrics.keyUnavailable.set(0);
    }
  }

  /** Reads the signing key for a term, retrying with backoff; a late success re-checks what was labelled without it. */
  #termKey(signal: AbortSignal, term: () => Term): TermLabelsKey {
    const namespace = this.#options.labelsKeyNamespace ?? 'kube-system';
    // Not `secret`: the logger redacts fields of that name.
    const keySecret = `${namespace}/${labelsKeySecretName}`;
    return new TermLabelsKey({
      load: (keySignal) => loadLabelsKey(this.#kube, namespace, keySignal),
      backoff: this.#options.labelsKeyBackoff ?? { initialMs: 1_000, maxMs: 300_000 },
      signal,
      onFailure: (err, retryInMs) => {
        this.#metrics.keyUnavailable.set(1);
        this.#logger.warn(
          { keySecret, err: describeError(err), retryInMs: Math.round(retryInMs) },
          'cannot read the key that signs managed-labels annotations; adding labels only, pruning none but kops role labels',
        );
      },
      onLoaded: ({ created }, failures) => {
        this.#metrics.keyUnavailable.set(0);
        if (created)
          this.#logger.info({ keySecret }, 'created the key that signs managed-labels annotations');
        if (failures === 0) return;
        const { unsigned, informer, enqueue } = term();
        let requeued = 0;
        for (const name of unsigned.keys()) {
          const record = informer.get(name);
          if (record) {
            enqueue(record);
            requeued++;
          }
        }
        this.#logger.info(
          { keySecret, nodes: requeued },
          'read the signing key; re-checking nodes labelled without it',
        );
      },
    });
  }

  async #run(term: Term, signal: AbortSignal): Promise<void> {
    const registry = this.#registry;
    await runController(
      {
        name: 'nodes',
        informer: term.informer,
        key: (node) => node.name,
        track: {
          // A change (a new providerID, edited labels) may be what lifts a refusal: its re-checks
          // start again from the first delay.
          update: (before, node) => {
            if (needsReconcile(before, node)) term.refusedInARow.delete(node.name);
          },
          delete: (node) => {
            term.prefetched.delete(node.name);
            term.groupOf.delete(node.name);
            term.refusals.delete(node.name);
            term.refusedInARow.delete(node.name);
            term.unsigned.delete(node.name);
          },
        },
        // A status heartbeat changes nothing the labels depend on.
        filter: (node, before) => !before || needsReconcile(before, node),
        onQueue: (node) => this.#prefetch(term, node),
        reconcile: async (name, workSignal) => {
          const outcome = await this.#reconcile(term, name, workSignal);
          if (outcome !== 'rejected') return { outcome };
          const requeueAfterMs = recheckDelayMs(
            term.refusedInARow.get(name) ?? 1,
            this.#options.rejectionRetryMs ?? 300_000,
            this.#options.maxRejectionRetryMs ?? 3_600_000,
          );
          return { outcome, requeueAfterMs };
        },
        watch: (enqueue) => {
          term.enqueue = enqueue;
          return this.#watchClusterStore(term, enqueue);
        },
        concurrency: this.#options.concurrency ?? 16,
        baseDelayMs: 500,
        maxDelayMs: this.#options.maxRetryDelayMs ?? 300_000,
        reconciles: this.#metrics.reconciles,
        registry,
        ...(this.#options.clock ? { clock: this.#options.clock } : {}),
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
      if (this.#stillCached(term, node)) {
        term.refusedInARow.set(name, (term.refusedInARow.get(name) ?? 0) + 1);
      }
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
    // The Node may have been deleted while the cloud and the store answered: its delete handler has
    // run, so what is remembered of it now would stay for the whole term.
    if (!this.#stillCached(term, node)) return 'deleted';
    term.groupOf.set(name, identity.instanceGroup);
    term.refusals.delete(name);
    term.refusedInARow.delete(name);
    // The instance group's labels win over what the cloud implies, as its nodeLabels win in kops.
    // APIServerNodes is the kops CLI's feature: its tag on the instance turns it on for this node,
    // and buildNodeLabels gives the role to control-plane groups only (kops' identifier would give
    // it to any instance so tagged, a worker that can tag itself included).
    const features = identity.apiServerTagged
      ? { ...this.#options.labelFeatures, apiServerNodes: true }
      : this.#options.labelFeatures;
    const desired = { ...identity.cloudLabels, ...buildNodeLabels(cluster, ig, features) };
    // Held for the term once read: no call per reconcile. Undefined while the Secret cannot be read.
    const signingKey = await untilAborted(term.key.ready(), signal);
    if (!this.#stillCached(term, node)) return 'deleted';
    const recorded = term.unsigned.get(name);
    const plan = planNodeLabels(node, desired, signingKey, recorded);
    if (plan.trust === 'unsigned' || plan.trust === 'invalid') {
      this.#metrics.untrusted.inc({ reason: plan.trust });
      // The annotation is the node's to write: logged cut short.
      const fields = { node: name, uid: node.uid, annotation: node.managedLabels?.slice(0, 256) };
      const message = 'managed-labels annotation not signed by this controller; pruning nothing from it';
      if (plan.trust === 'invalid') this.#logger.warn(fields, message);
      else this.#logger.debug(fields, message);
    }
    if (signingKey === undefined) {
      // What the signed set would have held, remembered here until it can be signed.
      const keys = recorded ?? new Set<string>();
      for (const label of Object.keys(desired)) keys.add(label);
      term.unsigned.set(name, keys);
    }
    if (isEmptyPlan(plan)) {
      if (signingKey !== undefined) term.unsigned.delete(name);
      return 'unchanged';
    }
    try {
      await patchNode(
        this.#kube,
        name,
        metadataPatch({
          // The Node the plan was made for, and no other: one deleted and re-created under its name
          // during the cloud lookup (another instance) must not get this one's labels and signature.
          uid: node.uid,
          labels: { set: plan.set, remove: plan.remove },
          ...(plan.annotations ? { annotations: { set: plan.annotations } } : {}),
        }),
        'strategic-merge',
        { signal },
      );
    } catch (err) {
      // Deleted, or re-created under its name: the new Node's own event queues it again.
      if (err instanceof NotFoundError || isUidMismatch(err)) return 'deleted';
      throw err;
    }
    if (signingKey !== undefined) term.unsigned.delete(name);
    const set = Object.keys(plan.set);
    this.#metrics.labelsSet.inc(set.length);
    this.#metrics.labelsRemoved.inc(plan.remove.length);
    this.#logger.info(
      {
        node: name,
        instanceGroup: identity.instanceGroup,
        set,
        removed: plan.remove,
        ...(signingKey === undefined ? { signed: false } : {}),
      },
      'labelled node',
    );
    return 'labelled';
  }

  /**
   * A node the cloud refuses (another cluster's instance, a stopped one, a bad providerID) gets no
   * labels; it is logged once per term and reported at every check as a Warning Event, which the
   * recorder writes once and refreshes now and then, whichever leader checks, and checked again
   * only after the rejection delay (the `rejected` outcome requeues it), so a spoofing node cannot
   * make the controller loop on the cloud API.
   */
  async #reject(term: Term, node: NodeRecord, error: Error, signal: AbortSignal): Promise<void> {
    const message = `not labelling node: ${describeError(error)}`;
    if (term.refusals.get(node.name) !== message) {
      const fields = { node: node.name, providerID: node.providerID, err: message };
      // A fleet of refused nodes (another cluster's instances, a mass stop) would write a line per
      // node at every leader change: past the first ones they go to debug, and the Events and
      // node_controller_reconciles_total{result="rejected"} keep the whole list.
      term.refusalLines++;
      if (term.refusalLines <= maxRefusalLinesPerTerm) this.#logger.warn(fields, 'identity rejected');
      else this.#logger.debug(fields, 'identity rejected');
      if (term.refusalLines === maxRefusalLinesPerTerm + 1) {
        this.#logger.warn(
          { logged: maxRefusalLinesPerTerm },
          `more than ${maxRefusalLinesPerTerm} nodes refused this leadership term; the rest are logged at debug (kubectl get events -A --field-selector reason=IdentityRejected lists them all)`,
        );
      }
      if (this.#stillCached(term, node)) term.refusals.set(node.name, message);
    }
    await this.#events.record(node, 'Warning', identityRejectedReason, message, signal);
  }

  /** Whether the cache still holds this Node (the same object: a re-created one has another uid). */
  #stillCached(term: Term, node: NodeRecord): boolean {
    return term.informer.get(node.name)?.uid === node.uid;
  }
}
