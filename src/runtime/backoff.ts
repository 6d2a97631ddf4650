/**
 * Capped exponential backoff with jitter, for reconnect loops (informers, leader election, components)
 * and for the node agent's retries (`join`).
 */

/** How a backoff grows. */
export interface BackoffOptions {
  /** The first delay, in milliseconds. */
  initialMs: number;
  /** The largest delay, in milliseconds. */
  maxMs: number;
  /** Growth per failure; defaults to 2. */
  factor?: number;
  /** Up to this fraction of the delay is added at random, so many clients do not retry in step. */
  jitter?: number;
  /** Random numbers in [0, 1); tests pass a fixed one. */
  random?: () => number;
}

/** A backoff sequence: each {@link Backoff.next} is longer than the last until the cap; `reset` restarts. */
export class Backoff {
  readonly #options: Required<BackoffOptions>;
  #failures = 0;

  constructor(options: BackoffOptions) {
    this.#options = { factor: 2, jitter: 0.2, random: Math.random, ...options };
  }

  /** The delay before the next attempt; counts one more failure. */
  next(): number {
    const { initialMs, maxMs, factor, jitter, random } = this.#options;
    const base = Math.min(maxMs, initialMs * factor ** this.#failures);
    this.#failures++;
    return Math.min(maxMs, base + base * jitter * random());
  }

  /** How many failures in a row have been counted. */
  get failures(): number {
    return this.#failures;
  }

  /** Starts over after a success. */
  reset(): void {
    this.#failures = 0;
  }
}
