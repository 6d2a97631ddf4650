/**
 * The controller skeleton every leader-only controller shares, as controller-runtime's: an informer's
 * adds and updates pass a filter and queue the object's key; a rate-limited work queue hands each key
 * to `reconcile`, at most `concurrency` at once and never one key twice at the same time. A reconcile
 * that throws is retried with the queue's per-key backoff (no sooner than the Retry-After its error
 * carries, up to the longest delay); one that asks to be looked at again later
 * is queued after that delay. Keys back after a delay wait behind keys queued by a change, and are
 * handed to `onQueue` as they come due, so that retries and re-checks due together share their cloud
 * calls as the informer's adds do. Other sources of work (a state store, a timer) queue records through the
 * same filter. The runner owns start and stop: on abort it stops those sources, drops what is queued,
 * waits for the reconciles in progress (their signal aborts) and releases the informer.
 */
import type { Counter, Registry } from 'prom-client';
import type { Logger } from '../log.ts';
import type { Clock } from '../runtime/clock.ts';
import type { InformerCache, InformerHandlers } from './informer.ts';
import { WorkQueue } from './workqueue.ts';

/** How one reconcile ended, when it did not throw. */
export interface Reconciled {
  /** The `result` label of the reconcile counter (default `success`). */
  outcome?: string;
  /** Look at the key again after this many ms, though nothing changed (a refusal that may lift). */
  requeueAfterMs?: number;
}

/** Options of {@link runController}. */
export interface ControllerOptions<R> {
  /** Names the work queue in the `workqueue_*` metrics and in logs. */
  name: string;
  /**
   * The cache whose changes queue work; the runner holds it (start) while it runs and releases it
   * (stop) after. A cache that is already synced, such as a view of a shared informer another holder
   * keeps running, is replayed: every record cached is queued as the first list's would be.
   */
  informer: InformerCache<R>;
  /** The queue key of a record (its name, for cluster-scoped objects). */
  key: (record: R) => string;
  /**
   * The controller's own bookkeeping of the cache (what it learnt about each object, what it indexes):
   * subscribed, with the cache replayed, before the queue's handlers, so a reconcile sees it, and
   * unsubscribed when the controller stops, so a later run starts from a clean slate.
   */
  track?: InformerHandlers<R>;
  /** Whether a record needs reconciling; `before` is set for updates. Default: every add and update. */
  filter?: (record: R, before?: R) => boolean;
  /**
   * Called as a record is queued, to start work that queued reconciles share (a batched cloud call):
   * by a change, and as its key comes back after a retry's or a requeue's delay (the record the
   * informer holds under that key then; none when it is gone).
   */
  onQueue?: (record: R) => void;
  /** Reconciles the object with `key`; throwing retries it with backoff. The signal aborts on stop. */
  reconcile: (key: string, signal: AbortSignal) => Promise<Reconciled | undefined>;
  /** Other sources of work, started before the informer; returns what stops them. */
  watch?: (enqueue: (record: R) => void) => () => void;
  /** Keys reconciled at once (default 1). */
  concurrency?: number;
  /** The first and the longest retry delay of a failing key, in ms (the work queue's defaults). */
  baseDelayMs?: number;
  maxDelayMs?: number;
  /** Counts each reconcile by its `result` label: the outcome, or `error`. */
  reconciles?: Counter;
  /** Where the work queue's metrics go; none when absent. */
  registry?: Registry;
  /** The work queue's clock, for its retry and requeue delays (tests move it). */
  clock?: Clock;
  logger?: Logger;
}

/** Runs a controller until `signal` aborts; resolves once everything it started has stopped. */
export async function runController<R>(options: ControllerOptions<R>, signal: AbortSignal): Promise<void> {
  const { informer, key, filter, onQueue, reconciles } = options;
  const queue = new WorkQueue({
    name: options.name,
    concurrency: options.concurrency,
    baseDelayMs: options.baseDelayMs,
    maxDelayMs: options.maxDelayMs,
    logger: options.logger,
    registry: options.registry,
    clock: options.clock,
    // Without it a retry or re-check looked its key up alone, batched only with the reconciles in
    // flight: thousands of refused nodes re-checked 16 per cloud call, under the call budget.
    ...(onQueue
      ? {
          onRequeue: (name: string) => {
            const record = informer.get(name);
            if (record) onQueue(record);
          },
        }
      : {}),
  });
  const enqueue = (record: R, before?: R) => {
    if (filter && !filter(record, before)) return;
    onQueue?.(record);
    queue.add(key(record));
  };
  const untrack = options.track ? informer.addHandlers(options.track, { replay: true }) : undefined;
  const unsubscribe = informer.addHandlers(
    { add: (record) => enqueue(record), update: (before, after) => enqueue(after, before) },
    { replay: true },
  );
  const stopWatching = options.watch?.((record) => enqueue(record));
  informer.start();
  queue.start(async (name, workSignal) => {
    let result: Reconciled | undefined;
    try {
      result = await options.reconcile(name, workSignal);
    } catch (err) {
      // A reconcile the shutdown cut short did not fail.
      if (!workSignal.aborted) reconciles?.inc({ result: 'error' });
      throw err;
    }
    reconciles?.inc({ result: result?.outcome ?? 'success' });
    if (result?.requeueAfterMs !== undefined) queue.addAfter(name, result.requeueAfterMs);
  });
  try {
    if (!signal.aborted) {
      await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
    }
  } finally {
    stopWatching?.();
    unsubscribe();
    untrack?.();
    await queue.shutdown({ drain: false });
    await informer.stop();
  }
}
