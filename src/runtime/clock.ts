/**
 * Time as the controllers see it. Leader election, backoff and the work queue read the time and set
 * timers only through a {@link Clock}, so tests drive them with a fake clock instead of waiting.
 */

/** The current time and one-shot timers. */
export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  /** Calls `fn` after `ms` milliseconds; the returned function cancels the timer. */
  setTimer(fn: () => void, ms: number): () => void;
}

/** The real clock. Timers are unref'd: a pending retry alone never keeps the process alive. */
export const systemClock: Clock = {
  now: () => Date.now(),
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
