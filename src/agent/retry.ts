/**
 * Retrying the node's calls through outages: a dependency fault (network error, timeout, 408, 429,
 * 5xx) is tried again after a capped, jittered backoff (so a thousand nodes booting at once do not
 * retry in step), or after the Retry-After the server named (capped) when that is longer, until a
 * deadline; anything else is a permanent answer and is thrown at once.
 */
import { setTimeout as delay } from 'node:timers/promises';
import { asKopsError, describeError, type KopsError, TimeoutError } from '../errors.ts';
import { type Logger, silentLogger } from '../log.ts';
import type { Backoff } from '../runtime/backoff.ts';

/** The longest Retry-After honoured: a hostile or confused answer cannot park the node for longer. */
export const maxRetryAfterMs = 5 * 60_000;

/** How long and how patiently to retry. */
export interface RetryOptions {
  /**
   * When no further attempt starts, on the monotonic clock (`performance.now()`): a node's clock is
   * stepped when chrony first syncs at boot, and that must neither end the retries nor prolong them.
   */
  deadline: number;
  backoff: Backoff;
  /** What is being attempted, for messages ("discovery", "bootstrap request"). */
  what: string;
  progress?: (line: string) => void;
  signal?: AbortSignal;
  logger?: Logger;
  /** Waits between attempts (default a real timer); tests pass one that only records. */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<unknown>;
  /** Monotonic milliseconds now, as `deadline` (default `performance.now`). */
  now?: () => number;
}

/** Errors worth another attempt: the server or the path to it may recover. */
export function isTransient(err: KopsError): boolean {
  return err.kind === 'unavailable' || err.kind === 'rate-limited' || err.kind === 'timeout';
}

/** The delay the answer asked for with Retry-After, if it did, capped. */
function retryAfterMs(err: KopsError): number | undefined {
  const seconds = err.details?.['retryAfterSeconds'];
  return typeof seconds === 'number' && seconds > 0 ? Math.min(seconds * 1000, maxRetryAfterMs) : undefined;
}

/** Runs `attempt` until it succeeds, fails for good, or the deadline passes (TimeoutError). */
export async function retryTransient<T>(attempt: () => Promise<T>, options: RetryOptions): Promise<T> {
  const logger = options.logger ?? silentLogger;
  const now = options.now ?? (() => performance.now());
  const sleep = options.sleep ?? ((ms: number, signal?: AbortSignal) => delay(ms, undefined, { signal }));
  const started = now();
  for (;;) {
    options.signal?.throwIfAborted();
    try {
      const result = await attempt();
      options.backoff.reset();
      return result;
    } catch (thrown) {
      const err = asKopsError(thrown);
      if (options.signal?.aborted || !isTransient(err)) throw err;
      // The longer of the two: a server that names a short Retry-After all through an outage (or a
      // proxy in front of it) must not hold the node to one attempt every few seconds for an hour.
      // The backoff counts every failure, so it keeps growing whatever the answers name.
      const backoffMs = options.backoff.next();
      const wait = Math.max(retryAfterMs(err) ?? 0, backoffMs);
      if (now() + wait > options.deadline) {
        const seconds = Math.round((now() - started) / 1000);
        throw new TimeoutError(`${options.what}: gave up after ${seconds}s: ${describeError(err)}`, {
          cause: err,
        });
      }
      // One line a retry (docs/join.md): where a progress line shows it, the log record is debug.
      const log = options.progress ? logger.debug.bind(logger) : logger.info.bind(logger);
      log({ err: describeError(err), retryInMs: Math.round(wait) }, `${options.what} failed; retrying`);
      options.progress?.(`${options.what}: retrying in ${Math.ceil(wait / 1000)}s: ${err.message}`);
      await sleep(wait, options.signal);
    }
  }
}
