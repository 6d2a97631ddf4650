/**
 * How every cloud client of this project retries a read (the REST clients of Hetzner, DigitalOcean
 * and Linode, Nova, the Scaleway SDK): a throttled, failing or unanswered call is tried again,
 * waiting what the API asked (`retryAfterSeconds` in the error's details: `Retry-After`, Scaleway's
 * `reset_seconds`) or else a doubling delay. A wait longer than the policy holds a caller is not
 * waited: the call fails at once as it stands, its RateLimitedError carrying the wait, so that a
 * bootstrap request is answered 503 with that Retry-After instead of being held (or retried early,
 * against an API that asked to be left alone).
 */
import { setTimeout as delay } from 'node:timers/promises';
import { KopsError } from '../errors.ts';

/** How a cloud read is retried. */
export interface CloudRetryPolicy {
  retries: number;
  /** First delay without a server-given wait; later ones double. */
  retryDelayMs: number;
  /** A server-asked wait longer than this fails at once instead. */
  maxRetryWaitMs: number;
  /** Aborted when the client is closed (the controller stops): no wait and no attempt after it. */
  signal?: AbortSignal;
}

/** Whether another attempt may succeed: the API throttled, failed or did not answer in time. */
export function isRetryableCloudError(err: unknown): err is KopsError {
  return (
    err instanceof KopsError &&
    (err.kind === 'rate-limited' || err.kind === 'unavailable' || err.kind === 'timeout')
  );
}

/**
 * Runs `attempt` until it succeeds, or fails with an error that is not retryable, or the retries
 * are spent, or the wait the API asks for is longer than the policy holds a caller.
 */
export async function retryCloudCall<T>(policy: CloudRetryPolicy, attempt: () => Promise<T>): Promise<T> {
  for (let n = 0; ; n++) {
    try {
      return await attempt();
    } catch (err) {
      if (!isRetryableCloudError(err)) throw err;
      const asked = err.details?.['retryAfterSeconds'];
      const waitMs = typeof asked === 'number' ? asked * 1000 : policy.retryDelayMs * 2 ** n;
      if (n >= policy.retries || waitMs > policy.maxRetryWaitMs || policy.signal?.aborted) throw err;
      // A close during the wait ends it (the delay rejects) and the last error stands.
      await delay(waitMs, undefined, { signal: policy.signal }).catch(() => undefined);
      if (policy.signal?.aborted) throw err;
    }
  }
}
