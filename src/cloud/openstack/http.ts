/**
 * One JSON request to an OpenStack API (Keystone, Nova) over the project's HTTP client: a deadline,
 * a bounded answer, the call counted, and a non-2xx answer turned into the typed error its status
 * names, with OpenStack's own message (`{"itemNotFound": {"message": …}}` from Nova,
 * `{"error": {"message": …}}` from Keystone) and any `Retry-After` in its details.
 */
import { describeError, errorForHttpStatus, type KopsError, UnavailableError } from '../../errors.ts';
import { createLogger, type Logger } from '../../log.ts';
import { type HttpsAnswer, httpsRequest } from '../../net/https-client.ts';
import { retryAfterSeconds } from '../../net/retry-after.ts';
import { isVerdictStatus } from '../api-answer.ts';
import { type CloudCallRecorder, httpCallResult, secondsSince } from '../metrics.ts';

/**
 * The variable kops sets when the cluster has `spec.cloudProvider.openstack.insecureSkipVerify`: the
 * OpenStack endpoints' certificates are then not verified (self-signed Keystone and Nova).
 */
export const insecureSkipVerifyVariable = 'KOPS_OS_TLS_INSECURE_SKIP_VERIFY';

/** Whether the variable is set to true, as Go's strconv.ParseBool reads it. */
export function openstackInsecureSkipVerify(env: Readonly<Record<string, string | undefined>> = process.env) {
  return ['1', 't', 'T', 'true', 'TRUE', 'True'].includes(env[insecureSkipVerifyVariable] ?? '');
}

/**
 * The TLS options of a request to an OpenStack endpoint (Keystone, Nova, Swift): unverified when the
 * variable is set. Only the OpenStack clients use it; every other client verifies as always.
 */
export function openstackTls(): { rejectUnauthorized?: false } {
  return openstackInsecureSkipVerify() ? { rejectUnauthorized: false } : {};
}

/** Whether this process has said that the OpenStack certificates are not verified. */
let insecureSkipVerifyLogged = false;

/**
 * Says once per process, loudly, that the OpenStack endpoints' certificates are not verified, when
 * the variable is set: every OpenStack client calls it at start-up (the provider, the Swift state
 * store), and the first with a logger that writes warnings says it. `logger` defaults to JSON lines on standard error, for a
 * client opened without the controller's logger (the state store).
 */
export function warnIfOpenstackInsecureSkipVerify(logger?: Logger): void {
  if (insecureSkipVerifyLogged || !openstackInsecureSkipVerify()) return;
  const to = logger ?? createLogger({ level: 'warn' });
  // A silent logger (a library default) says nothing, so it leaves the saying to the next client.
  if (!to.isLevelEnabled('warn')) return;
  insecureSkipVerifyLogged = true;
  to.warn(
    { variable: insecureSkipVerifyVariable },
    `${insecureSkipVerifyVariable} is set: the certificates of the OpenStack endpoints (Keystone, Nova, Swift) are NOT verified; anyone on the path can impersonate them`,
  );
}

/** One call. */
export interface OpenStackRequest {
  /** The operation's name for the metrics (`servers.get`, `tokens.create`), never an id. */
  call: string;
  url: URL;
  method?: 'GET' | 'POST';
  token?: string;
  body?: unknown;
  timeoutMs: number;
  maxBodyBytes: number;
  calls: CloudCallRecorder;
  /** Ends the request (the provider was closed); it then fails as unavailable. */
  signal?: AbortSignal;
}

/** The message an OpenStack error body carries, whichever service wrote it. */
function openstackMessage(body: Buffer): string | undefined {
  try {
    const parsed = JSON.parse(body.toString('utf8')) as Record<string, { message?: unknown } | undefined>;
    for (const value of Object.values(parsed)) {
      if (typeof value?.message === 'string') return value.message;
    }
  } catch {
    // Not JSON (a proxy's HTML page): the status alone speaks.
  }
  return undefined;
}

/** The typed error of a non-2xx answer. */
export function openstackError(what: string, answer: HttpsAnswer): KopsError {
  const own = openstackMessage(answer.body);
  const message = own ?? answer.body.toString('utf8').slice(0, 200);
  const retryAfter = retryAfterSeconds(answer.headers['retry-after'] as string | undefined);
  // A 4xx is a verdict on what was asked (no such server) only in OpenStack's own error body: with
  // any other (an endpoint that is not the service's, a proxy's page) it is a fault.
  if (isVerdictStatus(answer.status) && own === undefined) {
    return new UnavailableError(
      `${what}: HTTP ${answer.status}, not OpenStack's error answer (check the endpoint, and any proxy)`,
      { details: { status: answer.status, reason: 'not-the-api' } },
    );
  }
  return errorForHttpStatus(
    answer.status,
    `${what}: HTTP ${answer.status}${message ? `: ${message}` : ''}`,
    { details: { status: answer.status, ...(retryAfter ? { retryAfterSeconds: retryAfter } : {}) } },
    'unavailable',
  );
}

/** Sends one request; resolves to the answer for 2xx, rejects with a typed error otherwise. */
export async function openstackRequest(request: OpenStackRequest): Promise<HttpsAnswer> {
  const started = performance.now();
  const headers: Record<string, string> = { accept: 'application/json', 'user-agent': 'kops-controller' };
  if (request.token) headers['x-auth-token'] = request.token;
  let body: string | undefined;
  if (request.body !== undefined) {
    body = JSON.stringify(request.body);
    headers['content-type'] = 'application/json';
  }
  let status: number | undefined;
  try {
    const answer = await httpsRequest({
      url: request.url,
      method: request.method ?? 'GET',
      headers,
      ...(body === undefined ? {} : { body }),
      timeoutMs: request.timeoutMs,
      maxBodyBytes: request.maxBodyBytes,
      ...openstackTls(),
      ...(request.signal ? { signal: request.signal } : {}),
    }).catch((err: unknown) => {
      if (request.signal?.aborted) {
        throw new UnavailableError(`${request.call}: ${describeError(request.signal.reason)}`, {
          cause: err,
        });
      }
      throw err;
    });
    status = answer.status;
    if (answer.status < 200 || answer.status > 299) throw openstackError(request.call, answer);
    return answer;
  } finally {
    request.calls.request('openstack', request.call, httpCallResult(status));
    request.calls.duration('openstack', request.call, secondsSince(started));
  }
}
