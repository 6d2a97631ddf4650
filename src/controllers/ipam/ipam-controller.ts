/**
 * Cloud IPAM (`enableCloudIPAM`, kops' awsipam.go / gceipam.go / metalipam.go): a node without pod
 * ranges gets the ones its cloud routes to its instance — AWS the IPv6 prefix delegated to its ENI,
 * GCE its alias / external IPv6 range, metal its Host's `podCIDRs` — in `spec.podCIDRs` (and
 * `spec.podCIDR`), with one strategic-merge patch. Unlike kops it never writes over anything: the patch
 * carries the resourceVersion the decision was made on (a node changed meanwhile answers 409 and is
 * decided again), a node that has ranges keeps them, a range another node holds is not given twice,
 * and a node must be the instance its providerID names (by one of the instance's names, as the CSR
 * approver checks), so a copied providerID obtains nothing. Those cases are conflicts: a Warning Event
 * on the node (reason `PodCIDRConflict`), a count in `ipam_controller_conflicts_total{reason}`, the
 * `ipam_controller_nodes_in_conflict` gauge and a log line — each once per node and cause, looked at
 * again every `recheckMs`.
 *
 * A cloud that cannot be asked (throttled, failing) fails the reconcile, which the work queue retries
 * with per-node exponential backoff; nothing is patched from a failed or partial answer. A node the
 * cloud does not vouch for (another cluster's instance, a stopped one) gets nothing; the NodeController
 * reports it. It is looked at again after `recheckMs`, doubling while the verdict stays the same up to
 * an hour (the NodeController's `recheckDelayMs`), so thousands of foreign nodes cost few lookups.
 */
import type { KubeConfig, V1Node } from '@kubernetes/client-node';
import { Counter, Gauge, type Registry, register } from 'prom-client';
import { isCloudVerdict } from '../../bootstrap/dependency.ts';
import type { Outcome } from '../../cloud/batcher.ts';
import { bounded } from '../../deadline.ts';
import { describeError, InternalError, NotFoundError } from '../../errors.ts';
import { type Reconciled, runController } from '../../kube/controller.ts';
import type { InformerCache } from '../../kube/informer.ts';
import { type KubeHttps, kubeHttps } from '../../kube/kube-https.ts';
import { sharedMetric } from '../../kube/metrics.ts';
import { patchNode, patchTimeoutMs } from '../../kube/patch.ts';
import type { SharedInformer } from '../../kube/shared-informer.ts';
import { type Logger, silentLogger } from '../../log.ts';
import type { Clock } from '../../runtime/clock.ts';
import type { LeaderComponent } from '../../runtime/controller-runtime.ts';
import { assessInstance } from '../csr-approver/checks.ts';
import { recheckDelayMs } from '../node/node-controller.ts';
import { type NodeEventRecorder, sharedNodeEventRecorder } from '../node/node-event-recorder.ts';
import { parseCidr } from './cidr.ts';
import { decide, type IpamDecision } from './decide.ts';
import { type IpamNodeRecord, ipamRecordOf, needsReconcile } from './ipam-record.ts';
import { RangeIndex } from './range-index.ts';
import type { CloudAnswer, PodCidrSource } from './sources.ts';

/** How long one lookup of a node's pod ranges may take, the cloud SDK's retries included. */
const lookupTimeoutMs = 30_000;

/** The Event reason of a node whose pod ranges conflict. */
export const podCidrConflictReason = 'PodCIDRConflict';

/** How one reconcile ended, the `result` label of `ipam_controller_reconciles_total`. */
export type IpamResult =
  | 'assigned'
  | 'unchanged'
  | 'waiting'
  | 'conflict'
  | 'rejected'
  | 'skipped'
  | 'deleted'
  | 'error';

/** Options of an {@link IpamController}. */
export interface IpamControllerOptions {
  kubeConfig: KubeConfig;
  /** The process's Node watch (src/kube/shared-informer.ts); the controller adds its view of it. */
  nodes: SharedInformer<V1Node>;
  /** The cloud's record of pod ranges (src/controllers/ipam/sources.ts). */
  source: PodCidrSource;
  /** Nodes reconciled at once (default 16). */
  concurrency?: number;
  /**
   * When a node in conflict or refused by the cloud is looked at again, in ms (default 5 min). A
   * refusal that persists doubles it each time, up to `maxRefusalRecheckMs`, until the Node's
   * providerID or the cloud's verdict changes.
   */
  recheckMs?: number;
  /** The longest wait between looks at a node the cloud refuses again and again, in ms (default 1 h). */
  maxRefusalRecheckMs?: number;
  /**
   * When a node whose instance has no range yet is first looked at again, in ms (default 30 s); the
   * delay doubles with each look up to `recheckMs`, so nodes that never get a range cost few calls.
   */
  waitRetryMs?: number;
  /** The first and the longest retry delay after a failed cloud or API call, in ms (0.5 s, 5 min). */
  baseRetryDelayMs?: number;
  maxRetryDelayMs?: number;
  /** Where the controller's, its informer's and its queue's metrics go (default: prom-client's). */
  registry?: Registry;
  /** The work queue's clock, for its retry and re-check delays (tests move it). */
  clock?: Clock;
  /**
   * Writes its Events (default: the recorder shared by the controllers built from `kubeConfig`, the
   * NodeController's included, so that they share one write rate).
   */
  events?: NodeEventRecorder;
  logger?: Logger;
}

interface IpamMetrics {
  reconciles: Counter;
  assigned: Counter;
  conflicts: Counter;
  inConflict: Gauge;
}

function ipamMetrics(registry: Registry): IpamMetrics {
  const registers = [registry];
  return {
    reconciles: sharedMetric(
      registry,
      'ipam_controller_reconciles_total',
      () =>
        new Counter({
          name: 'ipam_controller_reconciles_total',
          help: 'IPAM reconciles of a node, by result.',
          labelNames: ['result'],
          registers,
        }),
    ),
    assigned: sharedMetric(
      registry,
      'ipam_controller_pod_cidrs_assigned_total',
      () =>
        new Counter({
          name: 'ipam_controller_pod_cidrs_assigned_total',
          help: 'Nodes given their pod ranges (spec.podCIDRs) from the cloud.',
          registers,
        }),
    ),
    conflicts: sharedMetric(
      registry,
      'ipam_controller_conflicts_total',
      () =>
        new Counter({
          name: 'ipam_controller_conflicts_total',
          help: 'Pod range conflicts reported (once per node and cause), by reason.',
          labelNames: ['reason'],
          registers,
        }),
    ),
    inConflict: sharedMetric(
      registry,
      'ipam_controller_nodes_in_conflict',
      () =>
        new Gauge({
          name: 'ipam_controller_nodes_in_conflict',
          help: 'Nodes whose pod ranges are in conflict now (not assigned, or differing from the cloud).',
          registers,
        }),
    ),
  };
}

/** One leadership term: the node cache, the ranges it holds and what was reported. */
interface Term {
  informer: InformerCache<IpamNodeRecord>;
  /** The ranges each node holds, as the cache last showed them (or as the patch answered). */
  held: RangeIndex;
  /** The ranges being assigned right now, so that two reconciles never give one range twice. */
  claimed: RangeIndex;
  /** Lookups started as nodes were queued, handed to their reconcile (so queued nodes share calls). */
  prefetched: Map<string, { key: string; answer: Promise<Map<string, Outcome<CloudAnswer>>> }>;
  /** The message last reported per node (conflict or refusal), so a persisting one is reported once. */
  reported: Map<string, string>;
  /** The nodes in conflict now, for the gauge. */
  conflicts: Set<string>;
  /** How often each node was found without a range in a row (its next look is later each time). */
  waits: Map<string, number>;
  /** How often in a row the cloud refused each node with the same verdict (its next look is later each time). */
  refusals: Map<string, { verdict: string; inARow: number }>;
}

/** The cloud IPAM controller, run by the controller runtime on the leader only. */
export class IpamController implements LeaderComponent {
  readonly name = 'ipam-controller';
  readonly #options: IpamControllerOptions;
  readonly #events: NodeEventRecorder;
  /** Node patches go over the pooled client: an edit or a first start patches a whole group (src/kube/patch.ts). */
  readonly #kube: KubeHttps;
  readonly #logger: Logger;
  readonly #registry: Registry;
  readonly #metrics: IpamMetrics;
  readonly #nodes: InformerCache<IpamNodeRecord>;

  constructor(options: IpamControllerOptions) {
    this.#options = options;
    this.#nodes = options.nodes.view('ipam', ipamRecordOf);
    this.#kube = kubeHttps(options.kubeConfig, { timeoutMs: patchTimeoutMs });
    this.#logger = (options.logger ?? silentLogger).child({ controller: 'ipam' });
    this.#registry = options.registry ?? register;
    this.#metrics = ipamMetrics(this.#registry);
    this.#events =
      options.events ??
      sharedNodeEventRecorder(options.kubeConfig, {
        registry: this.#registry,
        logger: options.logger ?? silentLogger,
      });
  }

  /** Follows the Node cache and assigns pod ranges until `signal` aborts. */
  async start(signal: AbortSignal): Promise<void> {
    const { source } = this.#options;
    const term: Term = {
      informer: this.#nodes,
      held: new RangeIndex(),
      claimed: new RangeIndex(),
      prefetched: new Map(),
      reported: new Map(),
      conflicts: new Set(),
      waits: new Map(),
      refusals: new Map(),
    };
    try {
      source.start?.();
      await runController(
        {
          name: 'ipam',
          informer: term.informer,
          key: (node) => node.name,
          // Replayed: the shared cache may have synced before this term, and every range held must be known.
          track: {
            add: (node) => term.held.set(node.name, node.podCIDRs),
            update: (before, node) => {
              term.held.set(node.name, node.podCIDRs);
              // Another instance (or ranges set by hand): a refusal may no longer hold.
              if (needsReconcile(before, node)) term.refusals.delete(node.name);
            },
            delete: (node) => this.#forget(term, node.name),
          },
          filter: (node, before) => !before || needsReconcile(before, node),
          onQueue: (node) => this.#prefetch(term, node),
          reconcile: (name, workSignal) => this.#reconcile(term, name, workSignal),
          // A deleted node frees its ranges: the nodes in conflict are decided again at once.
          watch: (enqueue) =>
            term.informer.addHandlers({
              delete: () => {
                for (const name of term.conflicts) {
                  const record = term.informer.get(name);
                  if (record) enqueue(record);
                }
              },
            }),
          concurrency: this.#options.concurrency ?? 16,
          baseDelayMs: this.#options.baseRetryDelayMs ?? 500,
          maxDelayMs: this.#options.maxRetryDelayMs ?? 300_000,
          reconciles: this.#metrics.reconciles,
          registry: this.#registry,
          ...(this.#options.clock ? { clock: this.#options.clock } : {}),
          logger: this.#logger,
        },
        signal,
      );
    } finally {
      await source.stop?.();
      this.#metrics.inConflict.dec(term.conflicts.size);
    }
  }

  /** The key the source knows a node by; undefined while the node has no providerID. */
  #keyOf(node: IpamNodeRecord): string | undefined {
    if (this.#options.source.byNodeName) return node.name;
    return node.providerID || undefined;
  }

  /** Starts a queued node's lookup now, so that nodes queued together share cloud calls. */
  #prefetch(term: Term, node: IpamNodeRecord): void {
    const key = this.#keyOf(node);
    if (key !== undefined && term.prefetched.get(node.name)?.key !== key) {
      const answer = this.#options.source.lookup([key]);
      // A source never rejects; should one, the reconcile that takes this promise over sees it.
      answer.catch(() => undefined);
      term.prefetched.set(node.name, { key, answer });
    }
  }

  async #lookup(term: Term, name: string, key: string, signal: AbortSignal) {
    const prefetched = term.prefetched.get(name);
    term.prefetched.delete(name);
    // Bounded, and given up when the term ends: a throttled cloud must not keep IPAM running after
    // the lease is lost. A lookup past its deadline fails the reconcile, which is retried.
    const answers = await bounded(
      (cut) => (prefetched?.key === key ? prefetched.answer : this.#options.source.lookup([key], cut)),
      lookupTimeoutMs,
      `look up the pod ranges of ${key}`,
      signal,
    );
    return (
      answers.get(key) ?? {
        ok: false,
        error: new InternalError(`the pod range source answered nothing for ${key}`),
      }
    );
  }

  async #reconcile(term: Term, name: string, signal: AbortSignal): Promise<Reconciled> {
    // Every node's ranges must be known before a range is judged free.
    if (!(await term.informer.waitForSync(signal))) return { outcome: 'skipped' };
    const queued = term.informer.get(name);
    if (!queued) {
      this.#forget(term, name);
      return { outcome: 'deleted' };
    }
    const key = this.#keyOf(queued);
    if (key === undefined) {
      // The update that sets the providerID queues the node again.
      return { outcome: 'skipped' };
    }
    const answer = await this.#lookup(term, name, key, signal);
    // The node may have gone, or changed, while the cloud answered: decide on what the cache holds now.
    const node = term.informer.get(name);
    if (!node) {
      this.#forget(term, name);
      return { outcome: 'deleted' };
    }
    // A new providerID queued the node again; this answer is about another instance.
    if (this.#keyOf(node) !== key) return { outcome: 'skipped' };
    const recheckMs = this.#options.recheckMs ?? 300_000;
    if (answer.ok && answer.value.ranges.kind !== 'none') term.waits.delete(name);
    if (!answer.ok) {
      if (!isCloudVerdict(answer.error)) throw answer.error;
      const message = `not assigning podCIDRs: the cloud does not vouch for ${key}: ${describeError(answer.error)}`;
      if (this.#firstReport(term, name, message))
        this.#logger.warn({ node: name, err: message }, 'node refused');
      // Another cluster's instance stays refused: checked less and less often, as the NodeController
      // does; a new verdict (a stopped instance now terminated) starts again from the first delay.
      const last = term.refusals.get(name);
      const inARow = last?.verdict === message ? last.inARow + 1 : 1;
      term.refusals.set(name, { verdict: message, inARow });
      const requeueAfterMs = recheckDelayMs(
        inARow,
        recheckMs,
        this.#options.maxRefusalRecheckMs ?? 3_600_000,
      );
      return { outcome: 'rejected', requeueAfterMs };
    }
    term.refusals.delete(name);
    const { ranges, identity } = answer.value;
    // The same rule as the CSR approver's: the node must be its instance, by one of the instance's names.
    const named =
      identity && assessInstance({ nodeName: name, serving: false, dnsNames: [], ipAddresses: [] }, identity);
    const decision = decide({
      node: name,
      current: node.podCIDRs,
      cloud: ranges,
      ...(named?.action === 'deny' ? { notItsInstance: named.message } : {}),
      holders: (cidr) => this.#holders(term, cidr, name),
    });
    switch (decision.action) {
      case 'unchanged':
        term.reported.delete(name);
        this.#setConflict(term, name, false);
        return { outcome: 'unchanged' };
      case 'wait': {
        if (this.#firstReport(term, name, decision.reason)) {
          this.#logger.info({ node: name, reason: decision.reason }, 'no pod range for the node yet');
        }
        const waits = term.waits.get(name) ?? 0;
        term.waits.set(name, waits + 1);
        const delay = (this.#options.waitRetryMs ?? 30_000) * 2 ** Math.min(waits, 20);
        return { outcome: 'waiting', requeueAfterMs: Math.min(delay, recheckMs) };
      }
      case 'conflict':
        await this.#reportConflict(term, node, decision, signal);
        return { outcome: 'conflict', requeueAfterMs: recheckMs };
      case 'assign':
        return this.#assign(term, node, decision.cidrs, signal);
    }
  }

  /** The other nodes holding or being given a range that overlaps `cidr`. */
  #holders(term: Term, cidr: string, node: string): string[] {
    const parsed = parseCidr(cidr);
    return [...new Set([...term.held.holders(parsed, node), ...term.claimed.holders(parsed, node)])].sort();
  }

  /**
   * Patches `spec.podCIDRs` (and `spec.podCIDR`, as kops) with the resourceVersion the decision was
   * made on: if anything changed the node meanwhile, the API server answers 409 and the node is
   * decided again once the cache has the change — a range set by someone else is never overwritten.
   */
  async #assign(term: Term, node: IpamNodeRecord, cidrs: string[], signal: AbortSignal): Promise<Reconciled> {
    term.claimed.set(node.name, cidrs);
    let patched: V1Node;
    try {
      patched = await patchNode(
        this.#kube,
        node.name,
        {
          metadata: { resourceVersion: node.resourceVersion },
          spec: { podCIDR: cidrs[0], podCIDRs: cidrs },
        },
        'strategic-merge',
        { signal },
      );
    } catch (err) {
      if (err instanceof NotFoundError) return { outcome: 'deleted' };
      throw err;
    } finally {
      term.claimed.delete(node.name);
    }
    term.held.set(node.name, ipamRecordOf(patched).podCIDRs);
    term.reported.delete(node.name);
    this.#setConflict(term, node.name, false);
    this.#metrics.assigned.inc();
    this.#logger.info({ node: node.name, podCIDRs: cidrs }, 'assigned pod ranges');
    return { outcome: 'assigned' };
  }

  /** A node gone from the cache: what the term kept about it goes, and it is in conflict no more. */
  #forget(term: Term, name: string): void {
    term.held.delete(name);
    term.prefetched.delete(name);
    term.reported.delete(name);
    term.waits.delete(name);
    term.refusals.delete(name);
    this.#setConflict(term, name, false);
  }

  /**
   * Reports a conflict: the counter and a log line once per node and cause and term, and a Warning
   * Event at every check, which the recorder writes once and refreshes now and then, whichever
   * leader checks (cancelled when the term ends, so an API server slow to take Events as the lease is
   * lost does not keep IPAM running past its stop budget; a write that fails is only logged).
   */
  async #reportConflict(
    term: Term,
    node: IpamNodeRecord,
    conflict: Extract<IpamDecision, { action: 'conflict' }>,
    signal: AbortSignal,
  ): Promise<void> {
    this.#setConflict(term, node.name, true);
    if (this.#firstReport(term, node.name, conflict.message)) {
      this.#metrics.conflicts.inc({ reason: conflict.reason });
      this.#logger.warn(
        { node: node.name, reason: conflict.reason, err: conflict.message },
        'pod range conflict',
      );
    }
    await this.#events.record(node, 'Warning', podCidrConflictReason, conflict.message, signal);
  }

  /** Records `message` as reported for `node`; false when it already was. */
  #firstReport(term: Term, node: string, message: string): boolean {
    if (term.reported.get(node) === message) return false;
    term.reported.set(node, message);
    return true;
  }

  #setConflict(term: Term, node: string, inConflict: boolean): void {
    const had = term.conflicts.has(node);
    if (inConflict && !had) {
      term.conflicts.add(node);
      this.#metrics.inConflict.inc();
    } else if (!inConflict && had) {
      term.conflicts.delete(node);
      this.#metrics.inConflict.dec();
    }
  }
}
