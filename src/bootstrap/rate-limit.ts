/**
 * Per-source token buckets for the bootstrap server: each remote address may burst `burst` requests
 * and then `ratePerSecond`. A flood from one address is answered with 429 while every other node
 * keeps joining. Idle buckets are dropped so that a scan from many addresses cannot grow memory
 * without bound.
 */
import { InvalidInputError } from '../errors.ts';
import { TokenBucket } from '../runtime/token-bucket.ts';

/** Limits of a {@link SourceRateLimiter}. */
export interface RateLimit {
  /** Requests a source may make at once. */
  burst: number;
  /** Requests per second a source regains. */
  ratePerSecond: number;
  /** At most this many sources are tracked; beyond it, full (idle) buckets are dropped first. */
  maxSources?: number;
}

/** The default: generous for a node's join (a few requests plus long-polls), tight for a flood. */
export const defaultRateLimit: RateLimit = { burst: 20, ratePerSecond: 5, maxSources: 100_000 };

/** The answer for one request: allowed, or how long to wait before the next one would be. */
export type RateDecision = { allowed: true } | { allowed: false; retryAfterSeconds: number };

/**
 * What the server asks before it answers a request. Serving workers ask their primary process, which
 * holds the one {@link SourceRateLimiter} of them all (src/bootstrap/workers.ts).
 */
export interface RequestLimiter {
  take(source: string): RateDecision | Promise<RateDecision>;
}

/** Token buckets keyed by source address. */
export class SourceRateLimiter implements RequestLimiter {
  readonly #limit: Required<RateLimit>;
  readonly #now: () => number;
  readonly #buckets = new Map<string, TokenBucket>();

  constructor(limit: RateLimit = defaultRateLimit, now: () => number = Date.now) {
    if (!(limit.burst >= 1 && limit.ratePerSecond > 0)) {
      throw new InvalidInputError('the bootstrap rate limit needs burst >= 1 and ratePerSecond > 0');
    }
    this.#limit = { maxSources: defaultRateLimit.maxSources as number, ...limit };
    this.#now = now;
  }

  /** Takes one token for `source`, or says how many seconds until one is available. */
  take(source: string): RateDecision {
    const now = this.#now();
    const bucket = this.#bucket(source, now);
    if (bucket.tryTake(now)) return { allowed: true };
    return { allowed: false, retryAfterSeconds: Math.ceil(bucket.msUntilToken(now) / 1000) };
  }

  /** How many sources are tracked (for tests and metrics). */
  get size(): number {
    return this.#buckets.size;
  }

  #bucket(source: string, now: number): TokenBucket {
    let bucket = this.#buckets.get(source);
    if (!bucket) {
      if (this.#buckets.size >= this.#limit.maxSources) this.#evict(now);
      bucket = new TokenBucket({ burst: this.#limit.burst, perSecond: this.#limit.ratePerSecond }, now);
      this.#buckets.set(source, bucket);
    }
    return bucket;
  }

  /** Drops buckets that have refilled completely (their sources are idle); if none, the oldest. */
  #evict(now: number): void {
    for (const [source, bucket] of this.#buckets) {
      if (bucket.isFull(now)) this.#buckets.delete(source);
    }
    if (this.#buckets.size >= this.#limit.maxSources) {
      const oldest = this.#buckets.keys().next().value;
      if (oldest !== undefined) this.#buckets.delete(oldest);
    }
  }
}
