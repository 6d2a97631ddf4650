/**
 * A token bucket: up to `burst` actions at once, then `perSecond`. The clock is passed in on every
 * call, so one bucket serves callers with their own clocks and tests need no timers.
 */
export interface BucketLimit {
  /** Actions that may happen at once (the bucket's size). */
  burst: number;
  /** Actions per second the bucket regains. */
  perSecond: number;
}

/** One bucket, full when made. */
export class TokenBucket {
  readonly #limit: BucketLimit;
  #tokens: number;
  #updatedMs: number;

  constructor(limit: BucketLimit, nowMs: number) {
    this.#limit = limit;
    this.#tokens = limit.burst;
    this.#updatedMs = nowMs;
  }

  /** Takes a token if one is there; false (and nothing taken) otherwise. */
  tryTake(nowMs: number): boolean {
    this.#refill(nowMs);
    if (this.#tokens < 1) return false;
    this.#tokens -= 1;
    return true;
  }

  /** Milliseconds until a token is there (0: now). */
  msUntilToken(nowMs: number): number {
    this.#refill(nowMs);
    return this.#tokens >= 1 ? 0 : ((1 - this.#tokens) / this.#limit.perSecond) * 1000;
  }

  /** The tokens there now (fractional while refilling). */
  tokens(nowMs: number): number {
    this.#refill(nowMs);
    return this.#tokens;
  }

  /** Whether the bucket has refilled completely: its user has been idle long enough to be forgotten. */
  isFull(nowMs: number): boolean {
    this.#refill(nowMs);
    return this.#tokens >= this.#limit.burst;
  }

  #refill(nowMs: number): void {
    const elapsedSeconds = Math.max(0, nowMs - this.#updatedMs) / 1000;
    this.#tokens = Math.min(this.#limit.burst, this.#tokens + elapsedSeconds * this.#limit.perSecond);
    this.#updatedMs = nowMs;
  }
}
