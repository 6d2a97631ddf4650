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

/** The longest delay Node's timers take: a longer one fires after 1 ms (TimeoutOverflowWarning). */
export const maxTimerMs = 2 ** 31 - 1;

/**
 * `setTimeout` for a delay of any length: one longer than {@link maxTimerMs} (24.8 days) is waited
 * in chunks of it, so that it ends when due instead of at once. Returns what cancels it.
 */
export function setLongTimeout(fn: () => void, ms: number, options: { unref?: boolean } = {}): () => void {
  let timer: NodeJS.Timeout;
  const arm = (left: number) => {
    timer = setTimeout(() => (left > maxTimerMs ? arm(left - maxTimerMs) : fn()), Math.min(left, maxTimerMs));
    if (options.unref) timer.unref();
  };
  arm(Math.max(0, ms));
  return () => clearTimeout(timer);
}

/** The real clock. Timers are unref'd: a pending retry alone never keeps the process alive. */
export const systemClock: Clock = {
  now: () => Date.now(),
  // CLOCK_MONOTONIC, as Node's own timers use.
  monotonic: () => performance.now(),
  setTimer: (fn, ms) => setLongTimeout(fn, ms, { unref: true }),
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
