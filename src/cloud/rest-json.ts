/**
 * A read-only JSON client for the bearer-token REST APIs of the callback clouds (Hetzner Cloud,
 * DigitalOcean): one GET, retried while the API is throttled or failing (retry.ts), every attempt
 * counted, every failure one typed error naming the call. The provider modules only say which paths
 * to read and how their pages link and how their 429 says when to come back. (The client is shared
 * by src/cloud/hetzner and src/cloud/digitalocean; its error mapping by src/cloud/linode.)
 */
import type { Agent as HttpAgent } from 'node:http';
import { errorForHttpStatus, type KopsError, RateLimitedError, UnavailableError } from '../errors.ts';
import { egressAgent } from '../net/egress-proxy.ts';
import { httpsRequest } from '../net/https-client.ts';
import { retryAfterSeconds } from '../net/retry-after.ts';
import { isVerdictStatus } from './api-answer.ts';
import {
  type CloudCallRecorder,
  type CloudName,
  httpCallResult,
  noCloudCalls,
  secondsSince,
} from './metrics.ts';
import { retryCloudCall } from './retry.ts';

/** Options of {@link RestJsonClient}. */
export interface RestJsonClientOptions {
  /** Who is called, for the cloud-call metrics and error messages. */
  cloud: CloudName;
  /** How the API is named to the operator (`the Hetzner Cloud API`). */
  title: string;
  /** Base URL, e.g. `https://api.hetzner.cloud/v1` (the simulator's in tests). */
  endpoint: string;
  /** The API token, sent as `Authorization: Bearer`. */
  token: string;
  /** Deadline of one attempt (default 10 s). */
  timeoutMs?: number;
  /** Retries of a throttled or failed read (default 3). */
  retries?: number;
  /** First retry delay without a server-given wait; later ones double (default 200 ms). */
  retryDelayMs?: number;
  /** The longest server-asked wait that is waited out rather than failed (default 5 s). */
  maxRetryWaitMs?: number;
  /** Largest answer accepted (default 16 MiB: a 200-droplet page is ~1 MiB). */
  maxBodyBytes?: number;
  cloudCalls?: CloudCallRecorder;
  /** How an error answer's body is read into one line (each API has its own envelope). */
  errorMessage?: (body: unknown) => string | undefined;
  /** How long a 429 asks to wait, in seconds, from its headers (default: `Retry-After`). */
  throttleWait?: (headers: AnswerHeaders) => number | undefined;
}

/** The retry and deadline settings of a client (tests shorten them). */
export type RestJsonTuning = Pick<
  RestJsonClientOptions,
  'retries' | 'retryDelayMs' | 'maxRetryWaitMs' | 'timeoutMs'
>;

/** What a provider fixes about its cloud's REST API: its name, where it is, how it answers errors. */
export interface RestJsonApi
  extends Pick<RestJsonClientOptions, 'cloud' | 'title' | 'errorMessage' | 'throttleWait'> {
  /** The public API's base URL. */
  defaultEndpoint: string;
  /** The environment variable that replaces it (as the cloud's own CLI reads it). */
  endpointVariable: string;
}

/**
 * The client of `api` at the endpoint given, else the environment's, else the public one; `options.api`
 * holds the retry and deadline settings (a provider's options, passed whole).
 */
export function restJsonClientOf(
  api: RestJsonApi,
  options: {
    endpoint?: string | undefined;
    token: string;
    api?: RestJsonTuning | undefined;
    cloudCalls?: CloudCallRecorder | undefined;
  },
): RestJsonClient {
  const { defaultEndpoint, endpointVariable, ...client } = api;
  return new RestJsonClient({
    ...client,
    endpoint: options.endpoint ?? (process.env[endpointVariable] || defaultEndpoint),
    token: options.token,
    ...options.api,
    ...(options.cloudCalls ? { cloudCalls: options.cloudCalls } : {}),
  });
}

/** The headers of an answer. */
export type AnswerHeaders = Record<string, string | string[] | undefined>;

/** One header's value. */
export function headerValue(headers: AnswerHeaders, name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/** One JSON answer. */
export interface JsonAnswer<T> {
  body: T;
  headers: AnswerHeaders;
}

/** The wait `Retry-After` asks for, in seconds. */
export function retryAfterWait(headers: AnswerHeaders): number | undefined {
  return retryAfterSeconds(headerValue(headers, 'retry-after'));
}

/** GETs JSON from one REST API. */
export class RestJsonClient {
  readonly #o: Required<Omit<RestJsonClientOptions, 'errorMessage'>> &
    Pick<RestJsonClientOptions, 'errorMessage'>;
  readonly #base: string;
  /** Kept-alive connections: a list of 100 pages reuses one TLS session instead of 100 handshakes. */
  readonly #agent: HttpAgent;
  /** Aborted by {@link destroy}: the calls in flight end, their retries and later calls with them. */
  readonly #closed = new AbortController();

  constructor(options: RestJsonClientOptions) {
    this.#o = {
      timeoutMs: 10_000,
      retries: 3,
      retryDelayMs: 200,
      maxRetryWaitMs: 5_000,
      maxBodyBytes: 16 * 1024 * 1024,
      cloudCalls: noCloudCalls,
      throttleWait: retryAfterWait,
      ...options,
    };
    this.#base = options.endpoint.replace(/\/$/, '');
    this.#agent = egressAgent(this.#base.startsWith('http:') ? 'http:' : 'https:', {
      keepAlive: true,
      maxSockets: 8,
    });
  }

  /** Ends the calls in flight, refuses later ones, and closes the kept-alive connections (shutdown). */
  destroy(): void {
    this.#closed.abort(new DOMException(`the ${this.#o.title} client was closed`, 'AbortError'));
    this.#agent.destroy();
  }

  /** GET `path` (relative to the endpoint, with its query), retried while throttled or failing. */
  async get<T>(operation: string, path: string): Promise<JsonAnswer<T>> {
    const { cloud, cloudCalls: calls, title } = this.#o;
    const started = performance.now();
    try {
      return await retryCloudCall({ ...this.#o, signal: this.#closed.signal }, async () => {
        let answer: Awaited<ReturnType<typeof httpsRequest>>;
        try {
          answer = await httpsRequest({
            url: new URL(`${this.#base}${path}`),
            headers: { authorization: `Bearer ${this.#o.token}`, accept: 'application/json' },
            timeoutMs: this.#o.timeoutMs,
            maxBodyBytes: this.#o.maxBodyBytes,
            agent: this.#agent,
            signal: this.#closed.signal,
          });
        } catch (err) {
          calls.request(cloud, operation, 'error');
          throw new UnavailableError(`${title} ${operation}: ${(err as Error).message}`, {
            cause: err,
            details: { operation },
          });
        }
        const parsed = parseJson(answer.body);
        // A 200 whose body is not JSON (truncated, a proxy's HTML page) is no usable answer.
        calls.request(
          cloud,
          operation,
          answer.status === 200 && parsed === undefined ? 'error' : httpCallResult(answer.status),
        );
        if (answer.status === 200 && parsed !== undefined)
          return { body: parsed as T, headers: answer.headers };
        // Only the API's own error body gives a reason: without one, a 4xx is not the API's verdict.
        const reason = this.#o.errorMessage?.(parsed);
        const wait = answer.status === 429 ? this.#o.throttleWait(answer.headers) : undefined;
        throw cloudAnswerError(
          `${title} ${operation} ${path.replace(/\?.*/, '')}`,
          operation,
          answer.status,
          reason,
          wait,
        );
      });
    } finally {
      calls.duration(cloud, operation, secondsSince(started));
    }
  }
}

/**
 * The typed error for an API's error answer: 429 rate-limited (with the wait), 401/403 the
 * controller's own token refused (not a verdict on any node: dependency.ts isCloudVerdict), 404
 * not-found, other 4xx invalid, and a 200 that is not JSON or a 5xx unavailable.
 */
export function cloudAnswerError(
  call: string,
  operation: string,
  status: number,
  reason: string | undefined,
  waitSeconds: number | undefined,
): KopsError {
  const message = `${call}: ${reason === undefined ? `HTTP ${status}` : `${reason} (HTTP ${status})`}`;
  const details = { operation, status, ...(waitSeconds ? { retryAfterSeconds: waitSeconds } : {}) };
  if (status === 429) {
    return new RateLimitedError(`${message}; the API's rate limit is exhausted, retry later`, { details });
  }
  if (status === 401 || status === 403) {
    return errorForHttpStatus(
      status,
      `${message}; check the controller's API token and its scopes`,
      { details },
      'unavailable',
    );
  }
  // A 4xx is a verdict on what was asked (no such server, an id the API refuses) only in the API's own
  // error body: the same status with any other body is not the API answering (an endpoint that is not
  // the API's, a proxy's page), a fault, never a denial of the node.
  if (isVerdictStatus(status) && reason === undefined) {
    return new UnavailableError(
      `${message}; not the API's error answer (check the API endpoint, and any proxy)`,
      {
        details: { ...details, reason: 'not-the-api' },
      },
    );
  }
  // A 200 that could not be read is a malformed answer, as every cloud client names one.
  if (status === 200) {
    return new UnavailableError(`${message}: not the JSON answer asked for`, {
      details: { ...details, reason: 'malformed-answer' },
    });
  }
  return errorForHttpStatus(status, message, { details }, 'unavailable');
}

function parseJson(body: Buffer): unknown {
  try {
    return JSON.parse(body.toString('utf8'));
  } catch {
    return undefined;
  }
}
