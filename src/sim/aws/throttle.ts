/**
 * The token bucket AWS documents for EC2 API request throttling: each request takes a token; an empty
 * bucket means `RequestLimitExceeded`; tokens come back at a fixed rate up to the capacity. For
 * non-mutating actions (Describe*) the bucket holds 100 tokens and refills 20 per second. Azure's ARM
 * simulator throttles reads the same way. The arithmetic is the controller's own bucket
 * (src/runtime/token-bucket.ts); this adds the simulator's clock and the providers' vocabulary.
 */
import { TokenBucket } from '../../runtime/token-bucket.ts';

/** Capacity and refill rate of a bucket. */
export interface ThrottleBucketOptions {
  capacity: number;
  refillPerSecond: number;
  /** Milliseconds clock; tests and the simulator pass their own. */
  now?: () => number;
}

/** The documented EC2 bucket for non-mutating actions. */
export const ec2NonMutatingBucket = { capacity: 100, refillPerSecond: 20 } as const;

/** A provider's request bucket on the simulator's clock; `take()` says whether a request may proceed. */
export class ThrottleBucket {
  readonly capacity: number;
  readonly refillPerSecond: number;
  readonly #now: () => number;
  #bucket: TokenBucket;

  constructor(options: ThrottleBucketOptions) {
    this.capacity = options.capacity;
    this.refillPerSecond = options.refillPerSecond;
    this.#now = options.now ?? (() => performance.now());
    this.#bucket = this.#full();
  }

  /** Takes one token if there is one. */
  take(): boolean {
    return this.#bucket.tryTake(this.#now());
  }

  /** Tokens available now (fractional while refilling). */
  get tokens(): number {
    return this.#bucket.tokens(this.#now());
  }

  /** Fills the bucket to capacity. */
  reset(): void {
    this.#bucket = this.#full();
  }

  #full(): TokenBucket {
    return new TokenBucket({ burst: this.capacity, perSecond: this.refillPerSecond }, this.#now());
  }
}
