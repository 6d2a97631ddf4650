/**
 * Retrying the node's calls through outages: network errors, 429 and 5xx are tried again after a
 * capped, jittered backoff (so a thousand nodes booting at once do not retry in step) until a
 * deadline; anything else is final and thrown at once.
 */
import { setTimeout as delay } from 'node:timers/promises';
import { asKopsError, describeError, type KopsError, TimeoutError } from '../errors.ts';
import type { Backoff } from '../kube/backoff.ts';
import { type Logger, silentLogger } from '../log.ts';

/** How long and how patiently to retry. */
export interface RetryOptions {
  /** Epoch milliseconds after which no further attempt starts. */
  deadline: number;
  backoff: Backoff;
  /** What is being attempted, for messages ("discovery", "bootstrap request"). */
  what: string;
  progress?: (line: string) => void;
  signal?: AbortSignal;
  logger?: Logger;
}

/** Errors worth another attempt: the server or the path to it may recover. */
export function isTransient(err: KopsError): boolean {
  return err.kind === 'unavailable' || err.kind === 'rate-limited' || err.kind === 'timeout';
}

/** The delay a 429 asked for, if it did (bounded, so a hostile answer cannot park the node). */
function retryAfterMs(err: KopsError): number | undefined {
  const seconds = err.details?.['retryAfterSeconds'];
  return typeof seconds === 'number' && seconds > 0 ? Math.min(seconds, 300) * 1000 : undefined;
}

/** Runs `attempt` until it succeeds, fails for good, or the deadline passes (TimeoutError). */
export async function retryTransient<T>(attempt: () => Promise<T>, options: RetryOptions): Promise<T> {
  const logger = options.logger ?? silentLogger;
  const started = Date.now();
  for (;;) {
    options.signal?.throwIfAborted();
    try {
      const result = await attempt();
      options.backoff.reset();
      return result;
    } catch (thrown) {
      const err = asKopsError(thrown);
      if (options.signal?.aborted || !isTransient(err)) throw err;
      const wait = retryAfterMs(err) ?? options.backoff.next();
      if (Date.now() + wait > options.deadline) {
        const seconds = Math.round((Date.now() - started) / 1000);
        throw new TimeoutError(`${options.what}: gave up after ${seconds}s: ${describeError(err)}`, {
          cause: err,
        });
      }
      logger.info(
        { err: describeError(err), retryInMs: Math.round(wait) },
        `${options.what} failed; retrying`,
      );
      options.progress?.(`${options.what}: retrying in ${Math.ceil(wait / 1000)}s: ${err.message}`);
      await delay(wait, undefined, { signal: options.signal });
    }
  }
}
