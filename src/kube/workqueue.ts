/**
 * A rate-limited work queue with client-go's semantics, for controllers that reconcile by key:
 * - a key queued while already queued is stored once;
 * - a key added while it is being processed is processed again once the current run ends, and never
 *   by two workers at the same time;
 * - a failed key is retried after a per-key exponential backoff until it succeeds (`forget` resets it),
 *   and not before what the failure's `Retry-After` asked (`retryAfterSeconds`, up to the longest delay);
 * - at most `concurrency` keys are processed at once;
 * - keys coming back after a delay (a retry, a re-check) wait behind keys added now (a new object, a
 *   change): thousands of re-checks never starve a new node, and a key added now while it waits to
 *   come back is moved ahead;
 * - failures are logged once per cause and ten minutes (src/kube/failure-causes.ts), not per key and
 *   attempt: 5,000 nodes retrying through a cloud outage write a line, not 320 a minute.
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { describeError, InternalError } from '../errors.ts';
import { type Logger, silentLogger } from '../log.ts';
import { type Clock, systemClock } from '../runtime/clock.ts';
import { FailureCauses } from './failure-causes.ts';
import { shortKey } from './informer.ts';
import { sharedMetric } from './metrics.ts';

/** Processes one key; throwing requeues the key with backoff. The signal aborts on `shutdown({drain:false})`. */
export type WorkHandler = (key: string, signal: AbortSignal) => Promise<void>;

/** Options of a {@link WorkQueue}. */
export interface WorkQueueOptions {
  /** Names the queue in metrics and logs. */
  name: string;
  /** How many keys are processed at once; defaults to 1. */
  concurrency?: number;
  /** The first retry delay of a failing key, in ms; defaults to 5 ms. */
  baseDelayMs?: number;
  /** The largest retry delay, in ms; defaults to 1000 s. */
  maxDelayMs?: number;
  /** Where the `workqueue_*` metrics are registered; none when absent. */
  registry?: Registry;
  /**
   * Called as a key comes back after its delay (`addAfter`, `addRateLimited`), to start the work its
   * processing will share with every other key due then (a batched cloud call), as adds from an
   * informer start it when they are queued.
   */
  onRequeue?: (key: string) => void;
  clock?: Clock;
  logger?: Logger;
}

/** Which line a waiting key stands in: added now (`fresh`), or back after a delay (`requeued`). */
type Lane = 'fresh' | 'requeued';

/** Keys in order, taken from the front; the taken part is dropped now and then, not on every take. */
class KeyLine {
  #keys: string[] = [];
  #head = 0;

  push(key: string): void {
    this.#keys.push(key);
  }

  shift(): string | undefined {
    if (this.#head >= this.#keys.length) return undefined;
    const key = this.#keys[this.#head++] as string;
    if (this.#head > 1024 && this.#head * 2 > this.#keys.length) {
      this.#keys.splice(0, this.#head);
      this.#head = 0;
    }
    return key;
  }

  clear(): void {
    this.#keys = [];
    this.#head = 0;
  }
}

/** How {@link WorkQueue.shutdown} ends: process what is queued first, or abort work in progress. */
export interface ShutdownOptions {
  drain: boolean;
}

interface QueueMetrics {
  depth: Gauge;
  adds: Counter;
  retries: Counter;
  queueDuration: Histogram;
  workDuration: Histogram;
  longestRunning: Gauge;
  unfinishedWork: Gauge;
}

const durationBuckets = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60, 300];

function queueMetrics(registry: Registry): QueueMetrics {
  const registers = [registry];
  const labelNames = ['name'] as const;
  const gauge = (name: string, help: string) =>
    sharedMetric(registry, name, () => new Gauge({ name, help, labelNames, registers }));
  const counter = (name: string, help: string) =>
    sharedMetric(registry, name, () => new Counter({ name, help, labelNames, registers }));
  const histogram = (name: string, help: string) =>
    sharedMetric(
      registry,
      name,
      () => new Histogram({ name, help, labelNames, registers, buckets: durationBuckets }),
    );
  return {
    depth: gauge('workqueue_depth', 'Keys waiting in the work queue.'),
    adds: counter('workqueue_adds_total', 'Keys added to the work queue.'),
    retries: counter('workqueue_retries_total', 'Keys requeued with backoff after a failure.'),
    queueDuration: histogram('workqueue_queue_duration_seconds', 'Time a key waits before processing.'),
    workDuration: histogram('workqueue_work_duration_seconds', 'Time processing one key takes.'),
    longestRunning: gauge(
      'workqueue_longest_running_processor_seconds',
      'How long the longest-running key has been processing.',
    ),
    unfinishedWork: gauge(
      'workqueue_unfinished_work_seconds',
      'Total time the keys in progress have been processing; growth without completions means a stuck worker.',
    ),
  };
}

/** The rate-limited work queue. Call {@link WorkQueue.start} once with the handler. */
export class WorkQueue {
  readonly name: string;
  readonly #concurrency: number;
  readonly #baseDelayMs: number;
  readonly #maxDelayMs: number;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #metrics: QueueMetrics | undefined;
  readonly #onRequeue: ((key: string) => void) | undefined;
  readonly #failureLog: FailureCauses;
  /**
   * Keys in processing order, fresh ones first. An entry counts only while the key's `#dirty` lane
   * is that line's and the key is not being processed: a key moved ahead leaves a stale entry behind,
   * skipped when reached.
   */
  readonly #lines: Record<Lane, KeyLine> = { fresh: new KeyLine(), requeued: new KeyLine() };
  /** Keys waiting in a line (not being processed). */
  #waiting = 0;
  /** Keys that need processing: the queued ones plus those re-added while processing. */
  readonly #dirty = new Map<string, { at: number; lane: Lane }>();
  /** Keys in progress, with when they started. */
  readonly #processing = new Map<string, number>();
  readonly #failures = new Map<string, number>();
  readonly #delayed = new Map<string, { at: number; cancel: () => void }>();
  readonly #abort = new AbortController();
  #handler: WorkHandler | undefined;
  #shuttingDown = false;
  #draining = false;
  #idle: (() => void) | undefined;

  constructor(options: WorkQueueOptions) {
    this.name = options.name;
    this.#concurrency = Math.max(1, options.concurrency ?? 1);
    this.#baseDelayMs = options.baseDelayMs ?? 5;
    this.#maxDelayMs = options.maxDelayMs ?? 1_000_000;
    this.#clock = options.clock ?? systemClock;
    this.#logger = (options.logger ?? silentLogger).child({ queue: options.name });
    this.#metrics = options.registry ? queueMetrics(options.registry) : undefined;
    if (this.#metrics) this.#registerCollect(this.#metrics);
    this.#onRequeue = options.onRequeue;
    this.#failureLog = new FailureCauses(this.#logger, {
      message: 'processing failed; retrying with backoff',
      now: () => this.#clock.monotonic(),
    });
  }

  /** Queues `key` unless it is already waiting (ahead of the keys back after a delay); ignored after shutdown. */
  add(key: string): void {
    this.#enqueue(key, 'fresh');
  }

  /**
   * Queues `key` after `delayMs`, behind the keys added meanwhile; of several pending delays for one
   * key, the earliest wins.
   */
  addAfter(key: string, delayMs: number): void {
    if (this.#shuttingDown) return;
    if (delayMs <= 0) {
      this.#requeue(key);
      return;
    }
    const at = this.#clock.monotonic() + delayMs;
    const pending = this.#delayed.get(key);
    if (pending && pending.at <= at) return;
    pending?.cancel();
    const cancel = this.#clock.setTimer(() => {
      this.#delayed.delete(key);
      this.#requeue(key);
    }, delayMs);
    this.#delayed.set(key, { at, cancel });
  }

  /** A key back after its delay: announced so that its work can start, and queued behind fresh keys. */
  #requeue(key: string): void {
    if (this.#shuttingDown) return;
    // Announced first: a free worker takes the key at once, and must find its work started.
    this.#onRequeue?.(key);
    this.#enqueue(key, 'requeued');
  }

  #enqueue(key: string, lane: Lane): void {
    if (this.#shuttingDown) return;
    this.#metrics?.adds.inc({ name: this.name });
    const dirty = this.#dirty.get(key);
    if (dirty) {
      // Added now while it waits to come back: it moves ahead, leaving its old entry to be skipped.
      if (lane === 'fresh' && dirty.lane === 'requeued') {
        dirty.lane = 'fresh';
        if (!this.#processing.has(key)) {
          this.#lines.fresh.push(key);
          this.#pump();
        }
      }
      return;
    }
    this.#dirty.set(key, { at: this.#clock.monotonic(), lane });
    if (this.#processing.has(key)) return;
    this.#lines[lane].push(key);
    this.#waiting++;
    this.#updateDepth();
    this.#pump();
  }

  /**
   * Queues `key` after its backoff (base × 2^failures, capped) and counts one more failure. With
   * `atLeastMs` (what an answer's `Retry-After` asked), it waits at least that long, but never more
   * than the longest retry delay: a hostile or mistaken `Retry-After` cannot park a key for hours.
   * Returns the delay.
   */
  addRateLimited(key: string, atLeastMs = 0): number {
    const failures = this.#failures.get(key) ?? 0;
    this.#failures.set(key, failures + 1);
    this.#metrics?.retries.inc({ name: this.name });
    const floor = Math.min(this.#maxDelayMs, Math.max(0, atLeastMs));
    const delayMs = Math.max(floor, this.backoffFor(failures));
    this.addAfter(key, delayMs);
    return delayMs;
  }

  /** The delay before the retry that follows `failures` earlier failures. */
  backoffFor(failures: number): number {
    return Math.min(this.#maxDelayMs, this.#baseDelayMs * 2 ** failures);
  }

  /** Clears the failure count of `key`, so its next failure backs off from the base delay again. */
  forget(key: string): void {
    this.#failures.delete(key);
  }

  /** How many times `key` has failed since it was last forgotten. */
  numRequeues(key: string): number {
    return this.#failures.get(key) ?? 0;
  }

  /** How many keys are waiting (not counting those in progress or delayed). */
  get length(): number {
    return this.#waiting;
  }

  /** How many keys are being processed right now. */
  get inProgress(): number {
    return this.#processing.size;
  }

  /** Starts the workers. Success forgets the key's failures; a thrown error requeues it with backoff. */
  start(handler: WorkHandler): void {
    if (this.#handler) throw new InternalError(`work queue ${this.name} already started`);
    this.#handler = handler;
    this.#pump();
  }

  /**
   * Stops the queue. New adds are ignored and delayed retries dropped. With `drain`, the keys already
   * queued are still processed; without, they are dropped and the handlers' signal aborts. Resolves when
   * no handler is running.
   */
  shutdown(options: ShutdownOptions = { drain: true }): Promise<void> {
    this.#shuttingDown = true;
    this.#draining = options.drain && this.#handler !== undefined;
    for (const { cancel } of this.#delayed.values()) cancel();
    this.#delayed.clear();
    if (!this.#draining) {
      this.#lines.fresh.clear();
      this.#lines.requeued.clear();
      this.#waiting = 0;
      this.#dirty.clear();
      this.#abort.abort(new Error(`work queue ${this.name} shut down`));
    }
    this.#updateDepth();
    return this.#isIdle() ? Promise.resolve() : new Promise((resolve) => (this.#idle = resolve));
  }

  #isIdle(): boolean {
    return this.#processing.size === 0 && (!this.#draining || this.length === 0);
  }

  #pump(): void {
    const handler = this.#handler;
    if (!handler) return;
    while (this.#processing.size < this.#concurrency && this.#waiting > 0) {
      const key = this.#next();
      if (key === undefined) break;
      this.#waiting--;
      const queuedAt = this.#dirty.get(key)?.at ?? this.#clock.monotonic();
      this.#dirty.delete(key);
      const startedAt = this.#clock.monotonic();
      this.#processing.set(key, startedAt);
      this.#metrics?.queueDuration.observe({ name: this.name }, (startedAt - queuedAt) / 1000);
      void this.#process(handler, key, startedAt);
    }
    this.#updateDepth();
    if (this.#shuttingDown && this.#isIdle() && this.#idle) {
      this.#idle();
      this.#idle = undefined;
    }
  }

  /** The next waiting key: the fresh line's first, else the requeued line's; stale entries skipped. */
  #next(): string | undefined {
    for (const lane of ['fresh', 'requeued'] as const) {
      const line = this.#lines[lane];
      for (let key = line.shift(); key !== undefined; key = line.shift()) {
        if (this.#dirty.get(key)?.lane === lane && !this.#processing.has(key)) return key;
      }
    }
    return undefined;
  }

  async #process(handler: WorkHandler, key: string, startedAt: number): Promise<void> {
    let failure: { err: unknown } | undefined;
    try {
      await handler(key, this.#abort.signal);
    } catch (err) {
      // Cut short by the shutdown: no failure to report or retry; the queue is going away.
      if (this.#abort.signal.aborted) {
        this.#logger.debug(
          { item: shortKey(key), err: describeError(err) },
          'processing stopped by the shutdown',
        );
      } else {
        failure = { err };
      }
    }
    this.#metrics?.workDuration.observe({ name: this.name }, (this.#clock.monotonic() - startedAt) / 1000);
    this.#processing.delete(key);
    if (failure) {
      const itemFailures = this.numRequeues(key) + 1;
      const retryInMs = this.addRateLimited(key, retryAfterMsOf(failure.err));
      // `item`, not `key`: the logger redacts fields named key (key material), which hid the name.
      // Cut short: a name is the API server's to bound, and one of megabytes is not logged whole.
      this.#failureLog.failed(failure.err, key, { item: shortKey(key), itemFailures, retryInMs });
    } else this.forget(key);
    const dirty = this.#dirty.get(key);
    if (dirty) {
      this.#lines[dirty.lane].push(key);
      this.#waiting++;
    }
    this.#pump();
  }

  #updateDepth(): void {
    this.#metrics?.depth.set({ name: this.name }, this.length);
  }

  /** The in-progress gauges are computed at scrape time from the start times of running keys. */
  #registerCollect(metrics: QueueMetrics): void {
    const collectors = collectorsOf(metrics);
    collectors.set(this.name, () => {
      const now = this.#clock.monotonic();
      let longest = 0;
      let total = 0;
      for (const started of this.#processing.values()) {
        longest = Math.max(longest, now - started);
        total += now - started;
      }
      metrics.longestRunning.set({ name: this.name }, longest / 1000);
      metrics.unfinishedWork.set({ name: this.name }, total / 1000);
    });
  }
}

/** The wait a failure's answer asked for (`Retry-After`, as `retryAfterSeconds` of a typed error), in ms. */
function retryAfterMsOf(err: unknown): number {
  const seconds = (err as { retryAfterSeconds?: unknown } | null)?.retryAfterSeconds;
  return typeof seconds === 'number' && Number.isFinite(seconds) && seconds > 0 ? seconds * 1000 : 0;
}

/** Per metric family, one collect callback per queue name (prom-client allows one collect per gauge). */
const collectorsByMetrics = new WeakMap<Gauge, Map<string, () => void>>();

function collectorsOf(metrics: QueueMetrics): Map<string, () => void> {
  let collectors = collectorsByMetrics.get(metrics.longestRunning);
  if (!collectors) {
    const created = new Map<string, () => void>();
    collectors = created;
    collectorsByMetrics.set(metrics.longestRunning, created);
    const gauge = metrics.longestRunning as Gauge & { collect?: () => void };
    gauge.collect = () => {
      for (const collect of created.values()) collect();
    };
  }
  return collectors;
}
