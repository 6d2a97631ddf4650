/**
 * A bounded least-recently-used cache with an optional time to live, for cloud facts that rarely or
 * never change (an instance's group, a template's group): memory stays bounded at 5,000+ nodes and
 * stale entries age out instead of living forever.
 */

/** Options of an {@link LruCache}. */
export interface LruOptions {
  /** Entries kept at most; the least recently used is dropped first. */
  maxEntries: number;
  /** Milliseconds after which an entry is treated as absent; unset means no expiry. */
  ttlMs?: number;
  /** The clock, for tests. */
  now?: () => number;
}

/** A Map-backed LRU cache: Map keeps insertion order, so re-inserting on read marks recency. */
export class LruCache<K, V> {
  readonly #entries = new Map<K, { value: V; storedAt: number }>();
  readonly #maxEntries: number;
  readonly #ttlMs: number | undefined;
  readonly #now: () => number;

  constructor(options: LruOptions) {
    if (!Number.isInteger(options.maxEntries) || options.maxEntries < 1) {
      throw new RangeError(`maxEntries must be a positive integer, got ${options.maxEntries}`);
    }
    this.#maxEntries = options.maxEntries;
    this.#ttlMs = options.ttlMs;
    this.#now = options.now ?? Date.now;
  }

  /** The number of entries held (expired ones included until they are next touched). */
  get size(): number {
    return this.#entries.size;
  }

  /** Returns the value for a key and marks it recently used; undefined if absent or expired. */
  get(key: K): V | undefined {
    const entry = this.#entries.get(key);
    if (!entry) return undefined;
    this.#entries.delete(key);
    if (this.#ttlMs !== undefined && this.#now() - entry.storedAt >= this.#ttlMs) return undefined;
    this.#entries.set(key, entry);
    return entry.value;
  }

  /** Stores a value, evicting the least recently used entry when full. */
  set(key: K, value: V): void {
    this.#entries.delete(key);
    this.#entries.set(key, { value, storedAt: this.#now() });
    if (this.#entries.size > this.#maxEntries) {
      const oldest = this.#entries.keys().next();
      if (!oldest.done) this.#entries.delete(oldest.value);
    }
  }

  /** Forgets one key. */
  delete(key: K): void {
    this.#entries.delete(key);
  }
}
