/**
 * Time as the controllers see it. Leader election, backoff and the work queue read the time and set
 * timers only through a {@link Clock}, so tests drive them with a fake clock instead of waiting.
 */

/** The current time and one-shot timers. */
export interface Clock {
  /**
   * Wall-clock time, milliseconds since the epoch: for timestamps that leave the process (a Lease's
   * `renewTime`, a record's date). It jumps when the system clock is stepped (NTP, `date -s`), so it
   * must not measure an interval that matters, such as a lease's expiry.
   */
  now(): number;
  /**
   * Monotonic time in milliseconds from an arbitrary origin: only differences between two readings
   * mean anything. It never jumps (NTP may only slew its rate slightly), so deadlines and elapsed
   * times are measured with it.
   */
  monotonic(): number;
  /** Calls `fn` after `ms` milliseconds (of monotonic time); the returned function cancels the timer. */
  setTimer(fn: () => void, ms: number): () => void;
}

/** The real clock. Timers are unref'd: a pending retry alone never keeps the process alive. */
export const systemClock: Clock = {
  now: () => Date.now(),
  // CLOCK_MONOTONIC, as Node's own timers use.
  monotonic: () => performance.now(),
  setTimer(fn, ms) {
    const timer = setTimeout(fn, Math.max(0, ms));
    timer.unref();
    return () => clearTimeout(timer);
  },
};

/** Waits `ms` on `clock`; resolves early (never rejects) when `signal` aborts. */
export function sleep(clock: Clock, ms: number, signal?: AbortSignal): Promise<void> {
  if (signal?.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const onAbort = () => {
      cancel();
      resolve();
    };
    const cancel = clock.setTimer(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
