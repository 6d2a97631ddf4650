/**
 * Coalesces lookups by key into batched calls: keys requested within a short window (from anywhere in
 * the process) share one call, a batch never exceeds the API's limit, only a few batches run at
 * once, and a key already pending or in flight is not asked for twice. This is what lets 5,000 nodes
 * be identified with a handful of cloud calls instead of 5,000.
 *
 * A window alone bounds calls by time, not by keys: requests that trickle in (a join storm, where
 * each node's request reaches the lookup as the server gets to it) would make a small call every
 * window. With a call budget, a batch that is not full goes only when the budget has a call left;
 * until then it stays open and keeps collecting keys. A quiet caller never waits for it (the budget is
 * full), a storm's calls are bounded by burst + perSecond × its duration however the keys arrive, and
 * a full batch goes at once, since waiting cannot make it carry more.
 */
import { InternalError } from '../errors.ts';
import { type BucketLimit, TokenBucket } from '../runtime/token-bucket.ts';

/** The outcome for one key of a batch. */
export type Outcome<V> = { ok: true; value: V } | { ok: false; error: Error };

/** How keys are grouped and fetched. */
export interface BatcherOptions<K, V> {
  /** How long to collect keys after the first one arrives before calling (e.g. 20 ms). */
  windowMs: number;
  /** The most keys one call may carry (EC2 DescribeInstances: 1,000). */
  maxBatchSize: number;
  /** Batches in flight at once. */
  maxConcurrent: number;
  /** Fetches one batch; a key missing from the result is a bug in `fetch`. */
  fetch: (keys: K[]) => Promise<Map<K, Outcome<V>>>;
  /** The calls batches that are not full may make (above); without it, every window's batch goes. */
  callBudget?: BucketLimit;
  /** Milliseconds, for the budget (default `performance.now`). */
  now?: () => number;
}

/** A key-coalescing batcher. */
export class Batcher<K, V> {
  readonly #options: BatcherOptions<K, V>;
  /** Keys waiting for the window to close, with the promise callers hold. */
  #pending = new Map<K, PromiseWithResolvers<V>>();
  readonly #inflight = new Map<K, Promise<V>>();
  readonly #queue: Map<K, PromiseWithResolvers<V>>[] = [];
  #running = 0;
  #timer: NodeJS.Timeout | undefined;
  readonly #now: () => number;
  readonly #budget: TokenBucket | undefined;

  constructor(options: BatcherOptions<K, V>) {
    this.#options = options;
    this.#now = options.now ?? (() => performance.now());
    this.#budget = options.callBudget && new TokenBucket(options.callBudget, this.#now());
  }

  /**
   * The value for one key, fetched with whatever other keys arrive in the same window. A key pending
   * or in flight is answered by that lookup, so a key must name everything its answer depends on
   * (identify-batches.ts puts the caller's age bound in it).
   */
  load(key: K): Promise<V> {
    const shared = this.#pending.get(key)?.promise ?? this.#inflight.get(key);
    if (shared) return shared;
    const deferred = Promise.withResolvers<V>();
    this.#pending.set(key, deferred);
    if (this.#pending.size >= this.#options.maxBatchSize) this.#cut();
    else this.#timer ??= setTimeout(() => this.#windowClosed(), this.#options.windowMs);
    return deferred.promise;
  }

  /** Outcomes for many keys; never rejects. */
  async loadMany(keys: readonly K[]): Promise<Map<K, Outcome<V>>> {
    const unique = [...new Set(keys)];
    const settled = await Promise.allSettled(unique.map((k) => this.load(k)));
    return new Map(
      unique.map((k, i) => {
        const s = settled[i] as PromiseSettledResult<V>;
        return [
          k,
          s.status === 'fulfilled' ? { ok: true, value: s.value } : { ok: false, error: s.reason as Error },
        ];
      }),
    );
  }

  /** The window is over: the batch goes if the budget allows a call, else it waits for one. */
  #windowClosed(): void {
    const waitMs = this.#budget?.msUntilToken(this.#now()) ?? 0;
    if (waitMs > 0) this.#timer = setTimeout(() => this.#windowClosed(), Math.ceil(waitMs));
    else this.#cut();
  }

  /** Closes the current window: its keys become a batch queued for fetching. */
  #cut(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#pending.size === 0) return;
    // A full batch goes without a token, but spends one if there is one.
    this.#budget?.tryTake(this.#now());
    const batch = this.#pending;
    this.#pending = new Map();
    for (const [key, deferred] of batch) this.#inflight.set(key, deferred.promise);
    this.#queue.push(batch);
    this.#drain();
  }

  #drain(): void {
    while (this.#running < this.#options.maxConcurrent && this.#queue.length > 0) {
      const batch = this.#queue.shift() as Map<K, PromiseWithResolvers<V>>;
      this.#running++;
      void this.#run(batch).finally(() => {
        this.#running--;
        this.#drain();
      });
    }
  }

  async #run(batch: Map<K, PromiseWithResolvers<V>>): Promise<void> {
    let results: Map<K, Outcome<V>> | undefined;
    let failure: unknown;
    try {
      results = await this.#options.fetch([...batch.keys()]);
    } catch (err) {
      failure = err;
    }
    for (const [key, deferred] of batch) {
      this.#inflight.delete(key);
      const outcome = results?.get(key);
      if (outcome?.ok) deferred.resolve(outcome.value);
      else if (outcome) deferred.reject(outcome.error);
      else
        deferred.reject(failure ?? new InternalError(`batched fetch returned no outcome for ${String(key)}`));
    }
  }
}
