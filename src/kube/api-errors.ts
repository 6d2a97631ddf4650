/**
 * Turns failures of @kubernetes/client-node calls into the project's typed errors, with the
 * apiserver's own `Status.message` (client-node 2.0.1 hands the body over as a raw JSON string).
 */
import { ApiException } from '@kubernetes/client-node';
import { errorForHttpStatus, KopsError, TimeoutError, UnavailableError } from '../errors.ts';
import { retryAfterSeconds } from '../net/retry-after.ts';

/** The `message` of a Kubernetes `Status` body, whether it arrives as a JSON string or an object. */
export function statusMessageOf(body: unknown): string | undefined {
  let status = body;
  if (typeof body === 'string') {
    try {
      status = JSON.parse(body);
    } catch {
      return body.trim() || undefined;
    }
  }
  if (status && typeof status === 'object' && 'message' in status && typeof status.message === 'string') {
    return status.message;
  }
  return undefined;
}

/** The HTTP status of a failed API call: `ApiException.code`, a watch error's `statusCode`, a typed error's `upstreamStatus`. */
export function httpStatusOfApiError(err: unknown): number | undefined {
  if (err instanceof ApiException) return err.code;
  // A watch stream's error carries statusCode; a typed error of the pooled client, upstreamStatus.
  const { statusCode, upstreamStatus } = (err ?? {}) as { statusCode?: unknown; upstreamStatus?: unknown };
  const code = statusCode ?? upstreamStatus;
  return typeof code === 'number' ? code : undefined;
}

/** The seconds of an answer's `Retry-After` (the apiserver sends delta-seconds with 429 and 503). */
function retryAfterOf(err: unknown): number | undefined {
  return retryAfterSeconds(err instanceof ApiException ? err.headers?.['retry-after'] : undefined);
}

/** What the operator can do about an answer, after its message (also src/kube/kube-https.ts). */
export const adviceByStatus: Partial<Record<number, string>> = {
  401: '; check the kubeconfig credentials',
  403: '; grant the permission in RBAC',
};

/**
 * Maps a client-node error to a typed error: 404 → NotFound, 409 → Conflict, 410 → Gone,
 * 401 → Unauthenticated, 403 → Forbidden, 400/422 → InvalidInput, 413 → TooLarge, 429 → RateLimited,
 * 5xx and network failures → Unavailable. `action` says what was being done ("read lease kube-system/x").
 * The status is kept as `upstreamStatus`, the answer's `Retry-After`, if any, as `retryAfterSeconds`.
 */
export function fromApiException(err: unknown, action = 'Kubernetes API call'): KopsError {
  if (err instanceof KopsError) return err;
  const code = httpStatusOfApiError(err);
  const retryAfterSeconds = retryAfterOf(err);
  const options = {
    cause: err,
    upstreamStatus: code,
    retryAfterSeconds: code === undefined ? undefined : retryAfterSeconds,
  };
  if (code === undefined) {
    const name = (err as { name?: unknown } | null)?.name;
    if (name === 'TimeoutError') return new TimeoutError(`${action} timed out`, options);
    const reason = err instanceof Error ? err.message : String(err);
    return new UnavailableError(
      `${action} failed: cannot reach the API server (${reason}); check the server address and network`,
      options,
    );
  }
  const body = err instanceof ApiException ? err.body : undefined;
  const detail =
    statusMessageOf(body) ?? (err instanceof Error && !(err instanceof ApiException) ? err.message : '');
  const message = `${action}: HTTP ${code}${detail ? `: ${detail}` : ''}${adviceByStatus[code] ?? ''}`;
  return errorForHttpStatus(code, message, options, 'unavailable');
}

/**
 * Reads one object: the object, or undefined when the API server says it does not exist
 * (404); any other failure is the typed error of {@link fromApiException} for `action`.
 */
export async function unlessNotFound<T>(read: () => Promise<T>, action: string): Promise<T | undefined> {
  try {
    return await read();
  } catch (err) {
    const error = fromApiException(err, action);
    if (error.kind === 'not-found') return undefined;
    throw error;
  }
}
