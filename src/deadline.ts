/**
 * Bounding the wait for a dependency: a call that does not answer must not hold whoever waits for it
 * (a node's request, a component that has to stop) for longer than they can wait.
 */
import { TimeoutError } from './errors.ts';
import { setLongTimeout } from './runtime/clock.ts';

/**
 * `work`, or a TimeoutError once `ms` have passed. The call itself runs on; its answer is dropped.
 * Prefer {@link bounded} for calls that take a signal: it also cancels them.
 */
export async function withDeadline<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
  let cancel = (): void => undefined;
  const deadline = new Promise<never>((_, reject) => {
    cancel = setLongTimeout(() => reject(new TimeoutError(`${what}: no answer within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([work, deadline]);
  } finally {
    cancel();
  }
}

/**
 * Runs `work` with a signal that aborts after `ms` or when `signal` does (its caller stopping), and
 * rejects as soon as either happens, with a TimeoutError or `signal`'s reason. A call that takes the
 * signal is cancelled (its connection closed); any other runs on and its answer is dropped. Nothing is
 * started once `signal` has aborted.
 */
export async function bounded<T>(
  work: (signal: AbortSignal) => Promise<T>,
  ms: number,
  what: string,
  signal?: AbortSignal,
): Promise<T> {
  signal?.throwIfAborted();
  const cut = new AbortController();
  const onAbort = () => cut.abort(signal?.reason);
  signal?.addEventListener('abort', onAbort, { once: true });
  const cancel = setLongTimeout(() => cut.abort(new TimeoutError(`${what}: no answer within ${ms} ms`)), ms);
  try {
    return await new Promise<T>((resolve, reject) => {
      cut.signal.addEventListener('abort', () => reject(cut.signal.reason), { once: true });
      work(cut.signal).then(resolve, reject);
    });
  } finally {
    cancel();
    signal?.removeEventListener('abort', onAbort);
  }
}

/**
 * `work`, or the signal's reason as soon as it aborts, for work that takes no signal (the cloud
 * identifier, the state store, a key being read): it runs on and its result is dropped, so nothing
 * from it is recorded once the caller has given up. No deadline (as {@link bounded} adds): in a
 * label storm a node's lookup waits its turn in the cloud's call budget for as long as the storm
 * needs, and each call bounds itself (SDK retries, the state store's and the API server's deadlines).
 */
export function untilAborted<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) {
    work.catch(() => undefined);
    return Promise.reject(signal.reason);
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (err: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(err);
      },
    );
  });
}
