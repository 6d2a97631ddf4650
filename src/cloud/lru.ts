/**
 * A bounded least-recently-used map with an optional time to live: the identity caches use it so
 * memory stays bounded however many nodes come and go.
 */
import { monotonicMs, youngerThan } from './age.ts';

/** Capacity, entry lifetime and clock of a cache. */
export interface LruOptions {
  maxEntries: number;
  /** Entries older than this are treated as absent; default: no expiry. */
  ttlMs?: number;
  /** Milliseconds on a clock that only the ages are read from (default monotonic: {@link monotonicMs}). */
  now?: () => number;
}

/** A bounded LRU map. */
export class LruCache<K, V> {
  readonly #entries = new Map<K, { value: V; storedAt: number }>();
  readonly #maxEntries: number;
  readonly #ttlMs: number;
  readonly #now: () => number;

  constructor(options: LruOptions) {
    if (!Number.isInteger(options.maxEntries) || options.maxEntries < 1) {
      throw new RangeError(`LruCache: maxEntries must be a positive integer, got ${options.maxEntries}`);
    }
    this.#maxEntries = options.maxEntries;
    this.#ttlMs = options.ttlMs ?? Number.POSITIVE_INFINITY;
    this.#now = options.now ?? monotonicMs;
  }

  /**
   * The value for a key, marking it most recently used; undefined when absent or expired. `maxAgeMs`
   * asks for a value stored less than that long ago: an older one is left in place (it still serves
   * callers content with the cache's own lifetime) but not returned.
   */
  get(key: K, maxAgeMs = Number.POSITIVE_INFINITY): V | undefined {
    const entry = this.#entries.get(key);
    if (entry === undefined) return undefined;
    this.#entries.delete(key);
    const now = this.#now();
    if (!youngerThan(entry.storedAt, now, this.#ttlMs)) return undefined;
    this.#entries.set(key, entry);
    return youngerThan(entry.storedAt, now, maxAgeMs) ? entry.value : undefined;
  }

  /**
   * Stores a value, evicting the least recently used entry when full. Expired entries at the least
   * recently used end go first: those of instances nobody asks about any more (nodes long deleted)
   * would otherwise be held until the cache is full, however old.
   */
  set(key: K, value: V): void {
    const now = this.#now();
    this.#entries.delete(key);
    for (const [oldestKey, oldest] of this.#entries) {
      if (youngerThan(oldest.storedAt, now, this.#ttlMs)) break;
      this.#entries.delete(oldestKey);
    }
    this.#entries.set(key, { value, storedAt: now });
    if (this.#entries.size > this.#maxEntries) {
      const oldest = this.#entries.keys().next();
      if (!oldest.done) this.#entries.delete(oldest.value);
    }
  }

  /** Removes a key. */
  delete(key: K): boolean {
    return this.#entries.delete(key);
  }

  /** Number of entries held (expired ones included until touched). */
  get size(): number {
    return this.#entries.size;
  }
}
