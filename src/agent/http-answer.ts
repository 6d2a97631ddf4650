/**
 * How the node reads an HTTP answer that is not the one it asked for, from the bootstrap endpoint or
 * from whatever stands in its place (a proxy, a load balancer, another server at a wrong URL).
 * A dependency fault — 408, 429, any 5xx — may pass, so it is retryable and carries the Retry-After
 * it named; any other status is a permanent answer that the same request would get again, so the
 * join ends at once. The status decides, never the body: a proxy's HTML 404 is as final as the
 * bootstrap API's JSON one. The message is one line naming the request, the status and the reason.
 */
import { STATUS_CODES } from 'node:http';
import {
  errorForHttpStatus,
  isFaultStatus,
  type KopsError,
  type KopsErrorOptions,
  TooLargeError,
} from '../errors.ts';
import { isJsonObject } from '../json-object.ts';
import { printable } from '../log.ts';
import { retryAfterSeconds } from '../net/retry-after.ts';
import { serverNowOf } from './node-clock.ts';

/** The body's own words: the bootstrap API's `{"error": {message, reason}}` or a Kubernetes Status. */
export function reasonOfBody(body: unknown): { message?: string; reason?: string } {
  if (!body || typeof body !== 'object') return {};
  const record = body as Record<string, unknown>;
  const error =
    record['error'] && typeof record['error'] === 'object'
      ? (record['error'] as Record<string, unknown>)
      : record;
  const message = typeof error['message'] === 'string' ? printable(error['message']) : undefined;
  const reason = typeof error['reason'] === 'string' ? printable(error['reason'], 80) : undefined;
  return { ...(message ? { message } : {}), ...(reason ? { reason } : {}) };
}

/** The JSON object in an answer, or undefined when the body is not one (an HTML error page, nothing). */
export function jsonObjectOf(bytes: Buffer): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(bytes.toString('utf8'));
    return isJsonObject(value) ? value : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The typed error for an HTTP answer of `status` to `request` ("GET https://…/cluster-info"): its kind
 * decides whether the node retries and which exit code `join` ends with. `hint` says what to do.
 * `date` is the answer's `Date` header: a Retry-After date is a time on the server's clock, so it is
 * read against that clock, not this machine's, which may be off by days before NTP sets it.
 */
export function answerError(
  request: string,
  status: number,
  bytes: Buffer,
  retryAfter: string | undefined,
  hint?: string,
  date?: string,
): KopsError {
  const { message, reason } = reasonOfBody(jsonObjectOf(bytes));
  const said = message ? `: ${message}${reason ? ` (${reason})` : ''}` : reason ? `: ${reason}` : '';
  const advice = hint ?? (status === 404 ? 'check the URL given to --server' : undefined);
  const line = `${request} answered ${status} ${STATUS_CODES[status] ?? 'unknown status'}${said}${advice ? `; ${advice}` : ''}`;
  const options: KopsErrorOptions = {
    details: {
      httpStatus: status,
      ...(reason ? { reason } : {}),
      ...(isFaultStatus(status)
        ? { retryAfterSeconds: retryAfterSeconds(retryAfter, serverNowOf(date)) }
        : {}),
    },
  };
  // 413: the node's request is larger than the server takes; the same request can never succeed.
  if (status === 413) return new TooLargeError(line, options);
  // 400, 405, 415, 422, 3xx (the node follows no redirect: it would leave the endpoint it was told to trust).
  return errorForHttpStatus(status, line, options, 'invalid');
}
