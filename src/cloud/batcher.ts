/**
 * Coalesces lookups by key into batched calls: keys requested within a short window (from anywhere in
 * the process) share one call, a batch never exceeds the API's limit, only a few batches run at
 * once, and a key already pending or in flight is not asked for twice. This is what lets 5,000 nodes
 * be identified with a handful of cloud calls instead of 5,000.
 */
import { InternalError } from '../errors.ts';

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

  constructor(options: BatcherOptions<K, V>) {
    this.#options = options;
  }

  /** The value for one key, fetched with whatever other keys arrive in the same window. */
  load(key: K): Promise<V> {
    const shared = this.#pending.get(key)?.promise ?? this.#inflight.get(key);
    if (shared) return shared;
    const deferred = Promise.withResolvers<V>();
    this.#pending.set(key, deferred);
    if (this.#pending.size >= this.#options.maxBatchSize) this.#cut();
    else this.#timer ??= setTimeout(() => this.#cut(), this.#options.windowMs);
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

  /** Closes the current window: its keys become a batch queued for fetching. */
  #cut(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#pending.size === 0) return;
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
