/**
 * Writing the controllers' Events about Nodes at fleet scale, as client-go's EventCorrelator does for
 * one (object, reason, message), but across leaders and restarts too. A report is seen again at every
 * check of a refused or conflicting node; writing it each time, or once per leadership term with a
 * random name, cost one Event per node at every failover or rollout (5,000 refused nodes, 5,000 new
 * Events; volume audit finding 7). So:
 *
 * - the Event's name is derived from the report, keyed with the replicas' shared secret
 *   (src/controllers/node/node-event.ts: no node can compute it, so none can create it first or find
 *   it to patch), and a create the API server answers `AlreadyExists` means another leader or an
 *   earlier process wrote it within the API server's Event TTL (1 h by default), so it is visible:
 *   it is left as it is. A report waits for the first read of the key to settle; while the key
 *   cannot be read, names are random (such an Event is found again only by the process that wrote
 *   it, and is written under its keyed name at its next refresh once there is a key);
 * - a report written less than `refreshMs` ago is not written again, only counted; once that has
 *   passed, the next one patches the Event's `count` and `lastTimestamp` (one that the TTL removed
 *   meanwhile is created again), so a refusal that lasts keeps one Event, current within `refreshMs`;
 * - every write takes a token of one bucket per process and API server (10 a second, 100 at once).
 *   Past it a report waits in a bounded backlog (10,000), written as tokens come, and past that it is
 *   dropped and counted; the next check of the node reports it again. Dropping alone was not enough:
 *   the re-checks of thousands of refused nodes come due together, so each round would have written
 *   about a burst's worth, and the last of 5,000 nodes would have got its Event days later.
 *
 * An Event only repeats what the log and the metrics say, so a write that fails is counted and logged
 * (once per cause and ten minutes) and never fails the caller; a caller that stops (its term ending)
 * gets its signal's reason at once, and what it left in the backlog is not written.
 */
import type { CoreV1Event, KubeConfig } from '@kubernetes/client-node';
import { Counter, type Registry, register } from 'prom-client';
import { untilAborted } from '../../deadline.ts';
import { FailureCauses } from '../../kube/failure-causes.ts';
import { type KubeHttps, kubeAnswerError, kubeHttps, kubeJson } from '../../kube/kube-https.ts';
import { sharedMetric } from '../../kube/metrics.ts';
import { type Logger, RecurringFailureLog, silentLogger } from '../../log.ts';
import { type Clock, systemClock } from '../../runtime/clock.ts';
import { type BucketLimit, TokenBucket } from '../../runtime/token-bucket.ts';
import { eventName, eventTimeoutMs, nodeEvent, reportKey } from './node-event.ts';
import type { NodeRecord } from './node-record.ts';

/** How one report ended, the `result` label of `node_event_reports_total`. */
export type EventWrite =
  /** A new Event. */
  | 'created'
  /** The Event's `count` and `lastTimestamp` patched. */
  | 'updated'
  /** Already written by another leader or an earlier process: left as it is. */
  | 'exists'
  /** Written by this process less than `refreshMs` ago, or being written: counted, not written. */
  | 'recent'
  /** Over the write rate: written from the backlog later (counted again then, by its write's result). */
  | 'queued'
  /** Over the write rate with the backlog full: not written; the next check reports it again. */
  | 'dropped'
  /** The API server refused or failed the write (logged); the next check reports it again. */
  | 'failed';

/** Options of a {@link NodeEventRecorder}. */
export interface NodeEventRecorderOptions {
  /** Event writes (creates and patches) at once and per second (default 100, then 10 a second). */
  limit?: BucketLimit;
  /** How long after writing an Event the same report is only counted (default 30 min). */
  refreshMs?: number;
  /** Reports waiting for the write rate at most (default 10,000); past it they are dropped. */
  maxBacklog?: number;
  /** Reports whose Event is remembered (default 20,000; the oldest forgotten first). */
  maxRemembered?: number;
  /**
   * The key Event names are made with ({@link eventNameKey}), once its first read has settled;
   * undefined while there is none. Asked at each report, so that every controller's Events wait for
   * the term's key, not only the one that reads it.
   */
  nameKey?: () => Uint8Array | undefined | Promise<Uint8Array | undefined>;
  /** Time: the Events' timestamps (wall clock) and the refresh and the rate (monotonic). */
  clock?: Clock;
  /** Where `node_event_reports_total` goes (default: prom-client's). */
  registry?: Registry;
  logger?: Logger;
}

/** What is known of one Event this process wrote, or found written. */
interface Remembered {
  /** Its name, and whether it was made with the key (a random one is made again once there is one). */
  name: string;
  keyed: boolean;
  /** The `count` the Event has; undefined for one found written by someone else. */
  count: number | undefined;
  /** Reports of it since it was last written. */
  unwritten: number;
  /** When it was last written or found written (monotonic ms). */
  writtenAt: number;
}

/** A report waiting in the backlog for a token. */
interface Waiting {
  node: Pick<NodeRecord, 'name' | 'uid'>;
  type: 'Normal' | 'Warning';
  reason: string;
  message: string;
  /** Its caller's: once it aborts (the term ended), the report is not written. */
  signal: AbortSignal;
  /** The key of names when it was reported. */
  key: Uint8Array | undefined;
}

const namespace = 'default';
const eventsPath = `/api/v1/namespaces/${namespace}/events`;

/** An Event timestamp: RFC 3339 at the second, as the API server writes `metav1.Time`. */
function timestamp(ms: number): string {
  return new Date(ms).toISOString().replace(/\.\d+Z$/, 'Z');
}

/** The Events of the controllers about Nodes, written at most once per report and `refreshMs`. */
export class NodeEventRecorder {
  readonly #kube: KubeHttps;
  readonly #clock: Clock;
  readonly #refreshMs: number;
  readonly #maxBacklog: number;
  readonly #maxRemembered: number;
  readonly #limit: BucketLimit;
  readonly #bucket: TokenBucket;
  readonly #nameKey: () => Uint8Array | undefined | Promise<Uint8Array | undefined>;
  /** By report ({@link reportKey}), the oldest first. */
  readonly #remembered = new Map<string, Remembered>();
  /** Reports waiting for a token, by report, oldest first. */
  readonly #backlog = new Map<string, Waiting>();
  #drainTimer: (() => void) | undefined;
  readonly #inFlight = new Set<string>();
  readonly #results: Counter;
  readonly #failures: FailureCauses;
  readonly #drops: RecurringFailureLog;

  constructor(kubeConfig: KubeConfig, options: NodeEventRecorderOptions = {}) {
    this.#kube = kubeHttps(kubeConfig, { timeoutMs: eventTimeoutMs });
    this.#clock = options.clock ?? systemClock;
    this.#refreshMs = options.refreshMs ?? 30 * 60_000;
    this.#maxBacklog = options.maxBacklog ?? 10_000;
    this.#maxRemembered = options.maxRemembered ?? 20_000;
    this.#nameKey = options.nameKey ?? (() => undefined);
    this.#limit = options.limit ?? { burst: 100, perSecond: 10 };
    this.#bucket = new TokenBucket(this.#limit, this.#clock.monotonic());
    const registry = options.registry ?? register;
    const name = 'node_event_reports_total';
    this.#results = sharedMetric(
      registry,
      name,
      () =>
        new Counter({
          name,
          help: 'Reports of the controllers as Events on Nodes, by result: created, updated, exists, recent (not written again), queued (for the write rate; counted again when written), dropped (backlog full), failed.',
          labelNames: ['result'],
          registers: [registry],
        }),
    );
    const logger = options.logger ?? silentLogger;
    const now = () => this.#clock.monotonic();
    this.#failures = new FailureCauses(logger, {
      message: 'could not write an Event; the log and metrics still report it',
      now,
    });
    this.#drops = new RecurringFailureLog(logger, {
      message:
        'Event writes over the rate limit with the backlog full; dropped, the next check reports them again',
      now,
    });
  }

  /** Reports waiting for the write rate. */
  get backlog(): number {
    return this.#backlog.size;
  }

  /**
   * Reports that `node` is in the state `message` describes (seen again at every check): writes the
   * Event if it is new or due again (or leaves it to the backlog), and otherwise only counts it.
   * Never throws but the signal's reason once it aborts.
   */
  async record(
    node: Pick<NodeRecord, 'name' | 'uid'>,
    type: 'Normal' | 'Warning',
    reason: string,
    message: string,
    signal: AbortSignal,
  ): Promise<EventWrite> {
    signal.throwIfAborted();
    const key = await untilAborted(Promise.resolve(this.#nameKey()), signal);
    const name = reportKey(node, type, reason, message);
    const now = this.#clock.monotonic();
    const known = this.#remembered.get(name);
    let result: EventWrite;
    if (known) {
      known.unwritten++;
      // Most recently seen last, so that the oldest report is the one forgotten.
      this.#remembered.delete(name);
      this.#remembered.set(name, known);
    }
    if (
      (known && now - known.writtenAt < this.#refreshMs) ||
      this.#inFlight.has(name) ||
      this.#backlog.has(name)
    ) {
      result = 'recent';
    } else if (this.#backlog.size === 0 && this.#bucket.tryTake(now)) {
      result = await this.#write(name, { node, type, reason, message, signal, key });
    } else if (this.#backlog.size < this.#maxBacklog) {
      // Behind the reports already waiting: the backlog drains in the order reports came.
      this.#backlog.set(name, { node, type, reason, message, signal, key });
      this.#scheduleDrain();
      result = 'queued';
    } else {
      this.#drops.failed(
        `over ${this.#limit.perSecond} Event writes a second (${this.#limit.burst} at once) and ${this.#maxBacklog} waiting`,
        { node: node.name, reason },
      );
      result = 'dropped';
    }
    this.#results.inc({ result });
    return result;
  }

  /** Arms the timer that writes the backlog as tokens come. */
  #scheduleDrain(): void {
    if (this.#drainTimer || this.#backlog.size === 0) return;
    const waitMs = Math.max(1, this.#bucket.msUntilToken(this.#clock.monotonic()));
    this.#drainTimer = this.#clock.setTimer(() => {
      this.#drainTimer = undefined;
      this.#drain();
    }, waitMs);
  }

  /** Writes what waits while tokens last; reports whose caller has stopped are let go. */
  #drain(): void {
    for (const [name, waiting] of this.#backlog) {
      if (!waiting.signal.aborted) {
        if (!this.#bucket.tryTake(this.#clock.monotonic())) break;
        this.#write(name, waiting).then(
          (result) => this.#results.inc({ result }),
          // Its caller stopped while it was written: nothing more to do.
          () => undefined,
        );
      }
      this.#backlog.delete(name);
    }
    this.#scheduleDrain();
  }

  /** Writes a report's Event, a token taken; rejects only with the caller's signal's reason. */
  async #write(report: string, waiting: Waiting): Promise<EventWrite> {
    const { node, type, reason, message, signal, key } = waiting;
    this.#inFlight.add(report);
    const keyed = key !== undefined;
    // An Event named at random (before the key was read) is written again under its keyed name once
    // there is a key, so that another leader finds it.
    const remembered = this.#remembered.get(report);
    const known = remembered && (remembered.keyed || !keyed) ? remembered : undefined;
    const name = known?.name ?? eventName(node, type, reason, message, key);
    try {
      const now = this.#clock.monotonic();
      const wall = this.#clock.now();
      if (known) {
        const count = known.count === undefined ? undefined : known.count + known.unwritten;
        const patched = await this.#patch(
          nodeEvent(name, node, type, reason, message, new Date(wall)),
          count,
          signal,
        );
        if (patched !== undefined) {
          this.#remember(report, { name, keyed: known.keyed, count: patched, unwritten: 0, writtenAt: now });
          return 'updated';
        }
        // Gone since (the API server's Event TTL): made again, with the count it would have had.
        const recount = count ?? 1;
        const created = await this.#create(
          nodeEvent(name, node, type, reason, message, new Date(wall), recount),
          signal,
        );
        this.#remember(report, {
          name,
          keyed: known.keyed,
          count: created ? recount : undefined,
          unwritten: 0,
          writtenAt: now,
        });
        return created ? 'created' : 'exists';
      }
      const created = await this.#create(
        nodeEvent(name, node, type, reason, message, new Date(wall)),
        signal,
      );
      this.#remember(report, { name, keyed, count: created ? 1 : undefined, unwritten: 0, writtenAt: now });
      return created ? 'created' : 'exists';
    } catch (err) {
      if (signal.aborted) throw signal.reason;
      this.#failures.failed(err, name, { node: node.name, reason, event: name });
      return 'failed';
    } finally {
      this.#inFlight.delete(report);
    }
  }

  /** Creates the Event; false when one of its name exists (another leader's, an earlier process's). */
  async #create(event: CoreV1Event, signal: AbortSignal): Promise<boolean> {
    const action = `create event ${event.metadata.name ?? ''}`;
    const at = timestamp(event.lastTimestamp?.getTime() ?? this.#clock.now());
    const answer = await this.#kube({
      action,
      method: 'POST',
      path: eventsPath,
      body: JSON.stringify({ ...event, firstTimestamp: at, lastTimestamp: at }),
      signal,
    });
    if (answer.status === 201 || answer.status === 200) return true;
    if (answer.status === 409) return false;
    throw kubeAnswerError(answer, action);
  }

  /**
   * Patches the Event to say `event` again, at its `lastTimestamp`, with `count` when known (one found
   * written by someone else keeps theirs); the count it has now, or undefined when there is no such
   * Event any more.
   */
  async #patch(
    event: CoreV1Event,
    count: number | undefined,
    signal: AbortSignal,
  ): Promise<number | undefined> {
    const name = event.metadata.name ?? '';
    const action = `patch event ${name}`;
    // What it says is written again too: whoever learnt its name and rewrote it is undone.
    const { type, reason, message, involvedObject, source, reportingComponent } = event;
    const body = { type, reason, message, involvedObject, source, reportingComponent };
    const answer = await this.#kube({
      action,
      method: 'PATCH',
      path: `${eventsPath}/${encodeURIComponent(name)}`,
      body: JSON.stringify({
        ...body,
        lastTimestamp: timestamp(event.lastTimestamp?.getTime() ?? this.#clock.now()),
        ...(count === undefined ? {} : { count }),
      }),
      contentType: 'application/merge-patch+json',
      signal,
    });
    if (answer.status === 404) return undefined;
    if (answer.status !== 200) throw kubeAnswerError(answer, action);
    const patched = kubeJson<{ count?: unknown }>(answer, action);
    return typeof patched.count === 'number' ? patched.count : (count ?? 1);
  }

  #remember(report: string, entry: Remembered): void {
    this.#remembered.delete(report);
    this.#remembered.set(report, entry);
    while (this.#remembered.size > this.#maxRemembered) {
      const oldest = this.#remembered.keys().next().value;
      if (oldest === undefined) break;
      this.#remembered.delete(oldest);
    }
  }
}

/** The recorder of each client configuration: the controllers of one process share its rate and memory. */
const recorders = new WeakMap<KubeConfig, NodeEventRecorder>();

/**
 * The recorder the controllers built from `kubeConfig` share, made with `options` by the first of
 * them: one write rate per API server and process, however many controllers report on Nodes, and
 * one memory of what was written, which outlives leadership terms.
 */
export function sharedNodeEventRecorder(
  kubeConfig: KubeConfig,
  options: NodeEventRecorderOptions = {},
): NodeEventRecorder {
  let recorder = recorders.get(kubeConfig);
  if (!recorder) {
    recorder = new NodeEventRecorder(kubeConfig, options);
    recorders.set(kubeConfig, recorder);
  }
  return recorder;
}
