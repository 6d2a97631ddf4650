/**
 * The token bucket AWS documents for EC2 API request throttling: each request takes a token; an empty
 * bucket means `RequestLimitExceeded`; tokens come back at a fixed rate up to the capacity. For
 * non-mutating actions (Describe*) the bucket holds 100 tokens and refills 20 per second.
 */

/** Capacity and refill rate of a bucket. */
export interface TokenBucketOptions {
  capacity: number;
  refillPerSecond: number;
  /** Milliseconds clock; tests and the simulator pass their own. */
  now?: () => number;
}

/** The documented EC2 bucket for non-mutating actions. */
export const ec2NonMutatingBucket = { capacity: 100, refillPerSecond: 20 } as const;

/** A token bucket; `take()` says whether a request may proceed. */
export class TokenBucket {
  readonly capacity: number;
  readonly refillPerSecond: number;
  readonly #now: () => number;
  #tokens: number;
  #updatedAt: number;

  constructor(options: TokenBucketOptions) {
    this.capacity = options.capacity;
    this.refillPerSecond = options.refillPerSecond;
    this.#now = options.now ?? (() => performance.now());
    this.#tokens = options.capacity;
    this.#updatedAt = this.#now();
  }

  /** Takes one token if there is one. */
  take(): boolean {
    this.#refill();
    if (this.#tokens < 1) return false;
    this.#tokens -= 1;
    return true;
  }

  /** Tokens available now (fractional while refilling). */
  get tokens(): number {
    this.#refill();
    return this.#tokens;
  }

  /** Fills the bucket to capacity. */
  reset(): void {
    this.#tokens = this.capacity;
    this.#updatedAt = this.#now();
  }

  #refill(): void {
    const now = this.#now();
    this.#tokens = Math.min(
      this.capacity,
      this.#tokens + ((now - this.#updatedAt) / 1000) * this.refillPerSecond,
    );
    this.#updatedAt = now;
  }
}
