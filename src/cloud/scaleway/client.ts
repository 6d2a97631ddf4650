/**
 * The Scaleway clients the controller uses, built on the official SDK (`@scaleway/sdk-client`,
 * `-instance`, `-ipam`) with the credentials kops reads (`SCW_ACCESS_KEY`, `SCW_SECRET_KEY`,
 * `SCW_DEFAULT_PROJECT_ID`; scalewaymetadata/profile.go) and `SCW_API_URL` for a private endpoint or
 * the simulator. Every request is counted and has a deadline (the SDK sets none); an SDK failure
 * becomes the typed error its status names, once, here (`scalewayCall`), and reads that fail for a
 * moment (429, 5xx, network, no answer) are retried as every cloud read is (src/cloud/retry.ts),
 * waiting what the API's `reset_seconds` asks.
 */
import { createAdvancedClient, type Errors, withHTTPClient, withProfile } from '@scaleway/sdk-client';
import { Instancev1 } from '@scaleway/sdk-instance';
import { Ipamv1 } from '@scaleway/sdk-ipam';
import { ConfigError, errorForHttpStatus, KopsError, TimeoutError, UnavailableError } from '../../errors.ts';
import { isJsonObject } from '../../json-object.ts';
import { egressFetch } from '../../net/egress-proxy.ts';
import { isVerdictStatus, malformedAnswer } from '../api-answer.ts';
import { cloudTime } from '../cloud-time.ts';
import {
  type CloudCallRecorder,
  type CloudCallResult,
  httpCallResult,
  noCloudCalls,
  secondsSince,
} from '../metrics.ts';
import { retryCloudCall } from '../retry.ts';

/** The Scaleway public API. */
export const defaultScalewayApiUrl = 'https://api.scaleway.com';

/** The controller's Scaleway credentials and locality. */
export interface ScalewayCredentials {
  accessKey: string;
  secretKey: string;
  projectId: string;
  /** The zone the cluster runs in, e.g. `fr-par-1`. */
  zone: string;
  apiUrl: string;
}

type Env = Record<string, string | undefined>;

/** The zone format the API accepts (`fr-par-1`). */
export const zonePattern = /^[a-z]{2}-[a-z]{3}-[1-9]$/;

/** The region of a zone (`fr-par-1` → `fr-par`). */
export function regionOfZone(zone: string): string {
  return zone.replace(/-[1-9]$/, '');
}

/**
 * The credentials the environment gives (`zone` overrides `SCW_DEFAULT_ZONE`). Throws ConfigError
 * naming every missing variable, as kops does.
 */
export function scalewayCredentialsFromEnv(env: Env = process.env, zone?: string): ScalewayCredentials {
  const value = (name: string) => env[name]?.trim() || undefined;
  const missing = ['SCW_ACCESS_KEY', 'SCW_SECRET_KEY', 'SCW_DEFAULT_PROJECT_ID'].filter((n) => !value(n));
  if (missing.length > 0) throw new ConfigError(`Scaleway: ${missing.join(', ')} must be set`);
  const chosen = zone ?? value('SCW_DEFAULT_ZONE');
  if (!chosen) throw new ConfigError('Scaleway: the zone is unknown: set SCW_DEFAULT_ZONE (e.g. fr-par-1)');
  if (!zonePattern.test(chosen))
    throw new ConfigError(`Scaleway: "${chosen}" is not a zone such as fr-par-1`);
  const apiUrl = (value('SCW_API_URL') ?? defaultScalewayApiUrl).replace(/\/+$/, '');
  return {
    accessKey: value('SCW_ACCESS_KEY') as string,
    secretKey: value('SCW_SECRET_KEY') as string,
    projectId: value('SCW_DEFAULT_PROJECT_ID') as string,
    zone: chosen,
    apiUrl,
  };
}

/** Options of {@link createScalewayClients}. */
export interface ScalewayClientOptions {
  credentials: ScalewayCredentials;
  /** Deadline of one request (default 15 s). */
  timeoutMs?: number;
  /** Retries after a 429, 5xx, network failure or no answer (default 3). */
  retries?: number;
  /** First retry delay when the API names none; doubles per retry (default 500 ms). */
  retryDelayMs?: number;
  /** The longest `reset_seconds` waited out; a longer one fails the call at once (default 10 s). */
  maxRetryWaitMs?: number;
  calls?: CloudCallRecorder;
  /** Aborted when the provider is closed: the calls in flight end, their retries with them. */
  signal?: AbortSignal;
}

/** The SDK APIs, and how to call them. */
export interface ScalewayClients {
  instance: Instancev1.API;
  ipam: Ipamv1.API;
  zone: string;
  region: string;
  projectId: string;
  /** Runs one read through the SDK with retries; failures are typed errors. */
  call<T>(what: string, read: () => Promise<T>): Promise<T>;
}

/** The name of the API operation a request path is, for the metrics (never an id). */
function operationOf(method: string, path: string): string {
  if (/\/instance\/v1\/zones\/[^/]+\/servers$/.test(path)) return 'instance.listServers';
  if (/\/instance\/v1\/zones\/[^/]+\/servers\/[^/]+$/.test(path)) return 'instance.getServer';
  if (/\/ipam\/v1\/regions\/[^/]+\/ips$/.test(path)) return 'ipam.listIPs';
  return `${method.toLowerCase()}.other`;
}

/** Whether an error is an SDK ScalewayError (it carries the HTTP status and the parsed body). */
function isScalewayError(err: unknown): err is Errors.ScalewayError {
  return err instanceof Error && typeof (err as { status?: unknown }).status === 'number' && 'body' in err;
}

/** The typed error of a failed SDK call. */
export function scalewayError(what: string, err: unknown): KopsError {
  if (err instanceof KopsError) return err;
  if (isScalewayError(err)) {
    // The SDK reads `reset_seconds` only of a 429 body that also has a `help_message`; of any other
    // its parsed body still says how long to wait.
    const body = isJsonObject(err.body) ? err.body : {};
    const reset = (err as { resetSeconds?: unknown }).resetSeconds ?? body['reset_seconds'];
    // A 4xx is a verdict only in Scaleway's own error body, which has a `message` or a `type` (its API
    // gateway answers an unknown zone `400 {"message": "Unknown zone in path"}` alone): with any other
    // it is not the API answering (src/cloud/api-answer.ts).
    if (
      isVerdictStatus(err.status) &&
      typeof body['message'] !== 'string' &&
      typeof body['type'] !== 'string'
    ) {
      return new UnavailableError(
        `${what}: ${err.message}; not the Scaleway API's error answer (check the endpoint, and any proxy)`,
        {
          cause: err,
          details: { status: err.status, reason: 'not-the-api' },
        },
      );
    }
    return errorForHttpStatus(
      err.status,
      `${what}: ${err.message}`,
      {
        cause: err,
        details: {
          status: err.status,
          ...(typeof reset === 'number' && reset >= 0 && Number.isFinite(reset)
            ? { retryAfterSeconds: reset }
            : {}),
        },
      },
      'unavailable',
    );
  }
  if (err instanceof Error && err.name === 'TimeoutError') {
    return new TimeoutError(`${what}: the Scaleway API did not answer in time`, { cause: err });
  }
  return new UnavailableError(`${what}: the Scaleway API is unreachable: ${(err as Error)?.message ?? err}`, {
    cause: err,
  });
}

/** The JSON of a 200's body; a body that is not JSON (truncated, a proxy's HTML page) is no answer. */
function jsonOf(call: string, text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw malformedAnswer(`the Scaleway API ${call}: a 200 whose body is not JSON`);
  }
}

/**
 * Checks the `creation_date` of the servers an Instance API answer carries (GetServer's `server`,
 * ListServers' `servers`; RFC 3339 with an offset, `2025-06-10T15:30:12.563745+00:00`). The SDK reads
 * one it cannot parse as none (@scaleway/sdk-client unmarshalDate), but a server's creation time
 * decides which machine a certificate was issued to: one that is there but is no time makes the
 * answer malformed here, before the SDK could drop it.
 */
function checkCreationDates(call: string, body: unknown): void {
  if (call !== 'instance.getServer' && call !== 'instance.listServers') return;
  const fields = isJsonObject(body) ? body : {};
  const listed = call === 'instance.getServer' ? [fields['server']] : fields['servers'];
  for (const record of Array.isArray(listed) ? listed : []) {
    if (!isJsonObject(record)) continue;
    const id = JSON.stringify(record['id'])?.slice(0, 40);
    cloudTime(record['creation_date'], `the Scaleway API ${call}: server ${id}'s creation_date`);
  }
}

/** Builds the SDK clients for one zone. */
export function createScalewayClients(options: ScalewayClientOptions): ScalewayClients {
  const { credentials } = options;
  const calls = options.calls ?? noCloudCalls;
  const timeoutMs = options.timeoutMs ?? 15_000;
  // The SDK's fetch, with a deadline and counted by operation.
  const httpClient: typeof fetch = async (input, init) => {
    const request = input instanceof Request ? input : new Request(input, init);
    const call = operationOf(request.method, new URL(request.url).pathname);
    const started = performance.now();
    let result: CloudCallResult | undefined;
    try {
      const deadline = AbortSignal.timeout(timeoutMs);
      const signal = options.signal ? AbortSignal.any([deadline, options.signal]) : deadline;
      const response = await egressFetch(request, { signal });
      result = httpCallResult(response.status);
      if (response.status !== 200) return response;
      // A 200 that cannot be read (not JSON, a server's creation time no time) is no answer: an
      // error, not ok.
      const text = await response.text();
      try {
        checkCreationDates(call, jsonOf(call, text));
      } catch (err) {
        result = 'error';
        throw err;
      }
      return new Response(text, { status: 200, statusText: response.statusText, headers: response.headers });
    } finally {
      calls.request('scaleway', call, result ?? httpCallResult(undefined));
      calls.duration('scaleway', call, secondsSince(started));
    }
  };
  let client: ReturnType<typeof createAdvancedClient>;
  try {
    client = createAdvancedClient(
      withProfile({
        accessKey: credentials.accessKey,
        secretKey: credentials.secretKey,
        defaultProjectId: credentials.projectId,
        defaultZone: credentials.zone,
        defaultRegion: regionOfZone(credentials.zone),
        apiURL: credentials.apiUrl,
      }),
      withHTTPClient(httpClient),
    );
  } catch (err) {
    // The SDK checks the formats: an access key SCW…, UUID secret key and project, an http(s) URL.
    throw new ConfigError(`Scaleway: ${(err as Error).message}`, { cause: err });
  }
  const policy = {
    retries: options.retries ?? 3,
    retryDelayMs: options.retryDelayMs ?? 500,
    maxRetryWaitMs: options.maxRetryWaitMs ?? 10_000,
    ...(options.signal ? { signal: options.signal } : {}),
  };
  const call = <T>(what: string, read: () => Promise<T>): Promise<T> =>
    retryCloudCall(policy, () => read().catch((raw: unknown) => Promise.reject(scalewayError(what, raw))));
  return {
    instance: new Instancev1.API(client),
    ipam: new Ipamv1.API(client),
    zone: credentials.zone,
    region: regionOfZone(credentials.zone),
    projectId: credentials.projectId,
    call,
  };
}
