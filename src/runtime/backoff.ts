/**
 * Capped exponential backoff with jitter, for reconnect loops (informers, leader election, components)
 * and for the node agent's retries (`join`).
 */

/** How a backoff grows. */
export interface BackoffOptions {
  /** The first delay, in milliseconds. */
  initialMs: number;
  /** The largest delay before jitter, in milliseconds. */
  maxMs: number;
  /** Growth per failure; defaults to 2. */
  factor?: number;
  /**
   * Up to this fraction of the delay is added at random, so many clients do not retry in step. It is
   * added after the cap (as Kubernetes' wait.Backoff does): a delay can reach `maxMs × (1 + jitter)`.
   */
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
    // Jitter after the cap: capping it away would make every client that has failed a while retry in step.
    return base + base * jitter * random();
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
