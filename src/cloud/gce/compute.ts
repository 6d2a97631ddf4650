/**
 * A small client for the parts of the Compute Engine v1 REST API that node identity and cloud groups
 * need, authenticated by google-auth-library. Plain REST over `AuthClient.request` rather than
 * `@google-cloud/compute`: that package is a 108 MB gRPC/protobuf stack for a handful of GET calls,
 * while the REST JSON is stable, documented, and lets the endpoint be pointed at the simulator.
 */
import { type AuthClient, GoogleAuth, gaxios } from 'google-auth-library';
import {
  ConfigError,
  ForbiddenError,
  InvalidInputError,
  KopsError,
  NotFoundError,
  RateLimitedError,
  UnauthenticatedError,
  UnavailableError,
} from '../../errors.ts';
import { type Logger, silentLogger } from '../../log.ts';
import { egressAgentFor } from '../../net/egress-proxy.ts';
import { isVerdictStatus } from '../api-answer.ts';
import {
  type CloudCallRecorder,
  type CloudCallResult,
  httpCallResult,
  noCloudCalls,
  secondsSince,
} from '../metrics.ts';

/** The public compute v1 endpoint. */
export const defaultComputeEndpoint = 'https://compute.googleapis.com/compute/v1';

/** The read-only OAuth scope the controller needs. */
export const computeReadOnlyScope = 'https://www.googleapis.com/auth/compute.readonly';

/** A `key: value` metadata item list, as instances and templates carry it. */
export interface GceMetadata {
  items?: Array<{ key: string; value?: string }>;
}

/** The fields of a compute#instance the controller reads. */
export interface GceInstance {
  id: string;
  name: string;
  /** URL of the instance's zone. */
  zone: string;
  status: string;
  selfLink?: string;
  creationTimestamp?: string;
  metadata?: GceMetadata;
  labels?: Record<string, string>;
  tags?: { items?: string[] };
  networkInterfaces?: GceNetworkInterface[];
}

/** The fields of a compute#networkInterface the controller reads. */
export interface GceNetworkInterface {
  networkIP?: string;
  /** The interface's internal IPv6 address (dual-stack and IPv6-only subnets). */
  ipv6Address?: string;
  accessConfigs?: Array<{ natIP?: string }>;
  /** External IPv6: the address and prefix length of the range routed to the instance (a /96). */
  ipv6AccessConfigs?: Array<{ externalIpv6?: string; externalIpv6PrefixLength?: number }>;
}

/** The fields of a compute#instanceGroupManager the controller reads. */
export interface GceInstanceGroupManager {
  id: string;
  name: string;
  /** URL of the MIG's zone (zonal MIGs) or absent. */
  zone?: string;
  /** URL of the MIG's region (regional MIGs). */
  region?: string;
  selfLink: string;
  instanceTemplate?: string;
  versions?: Array<{ instanceTemplate?: string; name?: string }>;
  targetSize: number;
}

/** One member of a MIG as `listManagedInstances` reports it. */
export interface GceManagedInstance {
  /** URL of the instance. */
  instance: string;
  /** The instance's numeric id; absent while it is being created. */
  id?: string;
  instanceStatus?: string;
  currentAction: string;
  version?: { instanceTemplate?: string; name?: string };
}

/** The fields of a compute#instanceTemplate the controller reads. */
export interface GceInstanceTemplate {
  id: string;
  name: string;
  selfLink?: string;
  properties?: { metadata?: GceMetadata };
}

/** The Shielded VM (vTPM) endorsement keys of an instance. */
export interface GceShieldedInstanceIdentity {
  signingKey?: { ekPub?: string; ekCert?: string };
  encryptionKey?: { ekPub?: string; ekCert?: string };
}

/** Options of {@link ComputeClient}. */
export interface ComputeClientOptions {
  /** Our project; every call is made in it. */
  project: string;
  /** The authenticated client (see {@link defaultAuthClient}). */
  auth: Pick<AuthClient, 'request'>;
  /** Base URL of the API; the simulator's `endpoint` in tests. */
  endpoint?: string;
  /** Retries of throttled (429, or 403 for an exhausted rate quota) and failed (5xx, network) reads. */
  retries?: number;
  /** First retry delay; later ones back off exponentially. */
  retryDelayMs?: number;
  /**
   * How long one attempt may wait for its answer (default 20 s, as the AWS and Azure clients): an API
   * that accepts the connection and never answers fails the call (unavailable) instead of holding it,
   * and the process at shutdown, forever.
   */
  requestTimeoutMs?: number;
  logger?: Logger;
  /** Where every request and call is counted (default: nowhere). */
  cloudCalls?: CloudCallRecorder;
}

/** The value of a metadata key, or undefined. */
export function metadataValue(metadata: GceMetadata | undefined, key: string): string | undefined {
  let value: string | undefined;
  for (const item of metadata?.items ?? []) {
    if (item.key === key) value = item.value;
  }
  return value;
}

/** The last path component of a resource URL (`…/zones/us-central1-a` → `us-central1-a`). */
export function lastComponent(url: string): string {
  return url.slice(url.lastIndexOf('/') + 1);
}

/**
 * The options that make google-auth-library's clients honour the egress proxy as every other client
 * does (src/net/egress-proxy.ts), instead of gaxios's own reading of the proxy variables (whose
 * NO_PROXY matches neither a host nor an address, so that the metadata server would be proxied). The
 * metadata server is read through gaxios's default instance (gcp-metadata), which this sets once.
 */
export function googleClientOptions(): { transporterOptions: { agent: typeof egressAgentFor } } {
  gaxios.instance.defaults = { ...gaxios.instance.defaults, agent: egressAgentFor };
  return { transporterOptions: { agent: egressAgentFor } };
}

/** Builds the production auth client: Application Default Credentials (the metadata server on GCE). */
export async function defaultAuthClient(): Promise<AuthClient> {
  try {
    return await new GoogleAuth({
      scopes: [computeReadOnlyScope],
      clientOptions: googleClientOptions(),
    }).getClient();
  } catch (err) {
    throw googleCredentialsError(err, 'cannot call the Compute Engine API');
  }
}

/**
 * google-auth-library's failure to find Application Default Credentials as a typed error, the one
 * mapping the compute client and the GCS state store share (`action` says what the credentials were
 * for). A credentials file that cannot be read or used (`GOOGLE_APPLICATION_CREDENTIALS`, or gcloud's
 * well-known file) is the configuration's fault: ConfigError (exit 78). No credentials anywhere, which
 * off GCE means the metadata server did not answer, is a dependency that failed: UnavailableError
 * (exit 69), as the AWS side treats "could not load credentials". Anything else (a token endpoint's
 * failure, a network error) is a fault too; a typed error passes through unchanged.
 */
export function googleCredentialsError(err: unknown, action: string): KopsError {
  if (err instanceof KopsError) return err;
  const message = err instanceof Error ? err.message : String(err);
  const path = process.env['GOOGLE_APPLICATION_CREDENTIALS'];
  if (
    message.startsWith('Unable to read the credential file specified by the GOOGLE_APPLICATION_CREDENTIALS')
  ) {
    return new ConfigError(
      `${action}: the Google credentials file ${path ?? ''} (GOOGLE_APPLICATION_CREDENTIALS) cannot be used: ` +
        message.replace(
          /^Unable to read the credential file specified by the GOOGLE_APPLICATION_CREDENTIALS environment variable: /,
          '',
        ),
      { cause: err },
    );
  }
  if (message.startsWith('The file at ')) {
    return new ConfigError(`${action}: the Google credentials file cannot be used: ${message}`, {
      cause: err,
    });
  }
  if (message.startsWith('Could not load the default credentials')) {
    return new UnavailableError(
      `${action}: no Google credentials: neither GOOGLE_APPLICATION_CREDENTIALS, gcloud's application ` +
        'default credentials nor a GCE metadata server provided any',
      { cause: err },
    );
  }
  return new UnavailableError(`${action}: cannot get Google credentials: ${message}`, { cause: err });
}

/** Most pages one list call may take (500 items a page: 500,000 items); more is a broken API. */
const maxListPages = 1_000;

/** A read-only compute v1 client for one project; errors are the project's typed errors. */
export class ComputeClient {
  readonly project: string;
  readonly #auth: Pick<AuthClient, 'request'>;
  readonly #base: string;
  readonly #retries: number;
  readonly #retryDelayMs: number;
  readonly #timeoutMs: number;
  readonly #logger: Logger;
  readonly #calls: CloudCallRecorder;
  /** Aborted by {@link close}: every call in flight ends, and every later one fails at once. */
  readonly #closed = new AbortController();

  constructor(options: ComputeClientOptions) {
    this.project = options.project;
    this.#auth = options.auth;
    this.#base = `${(options.endpoint ?? defaultComputeEndpoint).replace(/\/$/, '')}/projects/${encodeURIComponent(options.project)}`;
    this.#retries = options.retries ?? 3;
    this.#retryDelayMs = options.retryDelayMs ?? 200;
    this.#timeoutMs = options.requestTimeoutMs ?? 20_000;
    this.#logger = options.logger ?? silentLogger;
    this.#calls = options.cloudCalls ?? noCloudCalls;
  }

  /**
   * One API call. gaxios retries inside `request` (what it retries: {@link shouldRetry}); each failed
   * attempt is counted as it is retried (`onRetryAttempt`) and the last one when the call settles, so
   * throttled attempts show up even when a retry then succeeds.
   */
  async #call<T>(
    operation: string,
    method: 'GET' | 'POST',
    path: string,
    params: Record<string, string> = {},
  ) {
    if (this.#closed.signal.aborted) throw computeError(operation, path, this.#closed.signal.reason);
    const started = performance.now();
    const attemptFailed = (err: unknown) => this.#calls.request('gce', operation, attemptResult(err));
    let data: unknown;
    try {
      const response = await this.#auth.request<T>({
        url: `${this.#base}/${path}`,
        method,
        params,
        responseType: 'json',
        timeout: this.#timeoutMs,
        // The egress proxy as every client honours it (src/net/egress-proxy.ts), not gaxios's reading.
        agent: egressAgentFor,
        // gaxios does not retry a call its caller aborted.
        signal: this.#closed.signal,
        retryConfig: {
          retry: this.#retries,
          retryDelay: this.#retryDelayMs,
          // Replaces gaxios's own decision, which goes by status alone and so cannot tell a quota 403
          // from a permission 403. Every call here is a read, POST listManagedInstances included, so
          // the method does not matter: retrying is safe.
          shouldRetry: (err) => shouldRetry(err, this.#closed.signal),
          onRetryAttempt: (err) => {
            attemptFailed(err);
            this.#logger.debug({ operation, status: err.response?.status }, 'retrying compute API call');
          },
        },
      });
      data = response.data;
      // gaxios hands over a 200 whose body is not JSON (truncated, a proxy's HTML page) as its text:
      // no answer at all, counted as an error, and never read as an empty page.
      if (typeof data !== 'object' || data === null || Array.isArray(data)) {
        this.#calls.request('gce', operation, 'error');
      } else {
        this.#calls.request('gce', operation, 'ok');
        return data as T;
      }
    } catch (err) {
      attemptFailed(err);
      throw computeError(operation, path, err);
    } finally {
      this.#calls.duration('gce', operation, secondsSince(started));
    }
    throw new UnavailableError(
      `the compute API ${operation} ${path} answered a 200 whose body is not a JSON object`,
      { details: { operation, reason: 'malformed-answer' } },
    );
  }

  /**
   * Ends every call in flight and refuses later ones (the controller is stopping): a call waiting on a
   * slow compute API would otherwise hold the process open until its timeout.
   */
  close(): void {
    this.#closed.abort(
      new DOMException('the compute client was closed (the controller is stopping)', 'AbortError'),
    );
  }

  /**
   * Every page of a list call. A page token already followed (repeated, or a cycle of them) and
   * more than {@link maxListPages} pages are a broken API, not a big project: the listing ends with
   * an UnavailableError instead of looping. (An empty page with a next token is normal here:
   * filtered aggregated lists answer them.)
   */
  async #pages<T>(
    operation: string,
    method: 'GET' | 'POST',
    path: string,
    params: Record<string, string>,
    collect: (page: Record<string, unknown>) => T[],
  ): Promise<T[]> {
    const out: T[] = [];
    const followed = new Set<string>();
    let pageToken: string | undefined;
    for (let pages = 1; ; pages++) {
      const page = await this.#call<Record<string, unknown>>(operation, method, path, {
        ...params,
        maxResults: '500',
        ...(pageToken ? { pageToken } : {}),
      });
      const items = collect(page ?? {});
      out.push(...items);
      const next = typeof page?.['nextPageToken'] === 'string' ? page['nextPageToken'] : undefined;
      if (!next) return out;
      const broken =
        followed.has(next) || next === pageToken
          ? 'a page token it already answered'
          : pages >= maxListPages
            ? `more than ${maxListPages} pages`
            : undefined;
      if (broken) {
        throw new UnavailableError(
          `the compute API ${operation} ${path} answered ${broken} (page ${pages}); the listing is abandoned`,
          { details: { operation, reason: 'malformed-answer' } },
        );
      }
      if (pageToken) followed.add(pageToken);
      followed.add(next);
      pageToken = next;
    }
  }

  /**
   * instances.get; an answer naming another instance or zone than the one asked for (a proxy
   * mixing up answers) is an UnavailableError, never that instance under the asked name.
   */
  async getInstance(zone: string, name: string): Promise<GceInstance> {
    const instance = await this.#call<GceInstance>(
      'instances.get',
      'GET',
      `zones/${seg(zone)}/instances/${seg(name)}`,
    );
    const answeredZone = typeof instance?.zone === 'string' ? lastComponent(instance.zone) : undefined;
    if (instance?.name !== name || (answeredZone !== undefined && answeredZone !== zone)) {
      throw new UnavailableError(
        `the compute API instances.get ${zone}/${name} answered instance ${JSON.stringify(instance?.name)?.slice(0, 80)} in zone ${answeredZone ?? '(none)'}, not the one asked for`,
        { details: { operation: 'instances.get', reason: 'malformed-answer' } },
      );
    }
    return instance;
  }

  /** instances.list over every page, optionally filtered. */
  listInstances(zone: string, filter?: string): Promise<GceInstance[]> {
    return this.#pages(
      'instances.list',
      'GET',
      `zones/${seg(zone)}/instances`,
      filterParam(filter),
      (p) => (p['items'] as GceInstance[] | undefined) ?? [],
    );
  }

  /** instances.aggregatedList over every page and zone, optionally filtered. */
  aggregatedListInstances(filter?: string): Promise<GceInstance[]> {
    return this.#pages('instances.aggregatedList', 'GET', 'aggregated/instances', filterParam(filter), (p) =>
      scoped<GceInstance>(p, 'instances'),
    );
  }

  /** instances.getShieldedInstanceIdentity: the vTPM endorsement keys. */
  getShieldedInstanceIdentity(zone: string, name: string): Promise<GceShieldedInstanceIdentity> {
    return this.#call(
      'instances.getShieldedInstanceIdentity',
      'GET',
      `zones/${seg(zone)}/instances/${seg(name)}/getShieldedInstanceIdentity`,
    );
  }

  /** instanceGroupManagers.get (zonal). */
  getInstanceGroupManager(zone: string, name: string): Promise<GceInstanceGroupManager> {
    return this.#call(
      'instanceGroupManagers.get',
      'GET',
      `zones/${seg(zone)}/instanceGroupManagers/${seg(name)}`,
    );
  }

  /** instanceGroupManagers.aggregatedList over every page and zone, optionally filtered. */
  aggregatedListInstanceGroupManagers(filter?: string): Promise<GceInstanceGroupManager[]> {
    return this.#pages(
      'instanceGroupManagers.aggregatedList',
      'GET',
      'aggregated/instanceGroupManagers',
      filterParam(filter),
      (p) => scoped<GceInstanceGroupManager>(p, 'instanceGroupManagers'),
    );
  }

  /** instanceGroupManagers.listManagedInstances over every page. */
  listManagedInstances(zone: string, name: string): Promise<GceManagedInstance[]> {
    return this.#pages(
      'instanceGroupManagers.listManagedInstances',
      'POST',
      `zones/${seg(zone)}/instanceGroupManagers/${seg(name)}/listManagedInstances`,
      {},
      (p) => (p['managedInstances'] as GceManagedInstance[] | undefined) ?? [],
    );
  }

  /** instanceTemplates.get (global templates, the kind kops creates). */
  getInstanceTemplate(name: string): Promise<GceInstanceTemplate> {
    return this.#call('instanceTemplates.get', 'GET', `global/instanceTemplates/${seg(name)}`);
  }
}

/**
 * One path segment. `.` and `..` survive encodeURIComponent and would be resolved by the URL parser,
 * reaching another path of the API, whose answer says nothing about what was asked: refused.
 */
function seg(value: string): string {
  if (value === '' || value === '.' || value === '..')
    throw new InvalidInputError(`"${value}" cannot name a compute API resource`);
  return encodeURIComponent(value);
}

function filterParam(filter: string | undefined): Record<string, string> {
  return filter ? { filter } : {};
}

/**
 * Flattens an aggregatedList page: `{ items: { "zones/x": { <field>: [...] } } }`. A page that says a
 * scope could not be reached (`unreachables`, or a scope's warning `UNREACHABLE`) is partial: its
 * instances would read as not ours, so it is an UnavailableError, never a listing without them.
 */
function scoped<T>(page: Record<string, unknown>, field: string): T[] {
  const items = (page['items'] ?? {}) as Record<string, Record<string, unknown> | undefined>;
  const unreachable = [
    ...(Array.isArray(page['unreachables']) ? page['unreachables'].map(String) : []),
    ...Object.entries(items)
      .filter(([, scope]) => (scope?.['warning'] as { code?: unknown } | undefined)?.code === 'UNREACHABLE')
      .map(([name]) => name),
  ];
  if (unreachable.length > 0) {
    throw new UnavailableError(
      `the compute API could not reach ${unreachable
        .slice(0, 5)
        .map((scope) => scope.slice(0, 80))
        .join(', ')}: the aggregated list is partial`,
      { details: { reason: 'partial-listing' } },
    );
  }
  return Object.values(items).flatMap((scope) => (scope?.[field] as T[] | undefined) ?? []);
}

/** Google's JSON error envelope, as far as it is read here. */
interface GoogleErrorBody {
  error?: { message?: string; errors?: Array<{ reason?: string; domain?: string }> };
}

/**
 * The `errors[].reason` values with which Compute Engine answers an exhausted rate quota. It does so
 * with HTTP 403, not 429 (cloud.google.com/compute/api-quota: "If your project exceeds a rate quota,
 * you receive a 403 error with the reason rateLimitExceeded"); any other 403 (`forbidden`,
 * `insufficientPermissions`) is a missing permission or scope, which no retry fixes.
 */
const rateQuotaReasons: ReadonlySet<string> = new Set(['rateLimitExceeded', 'userRateLimitExceeded']);

function statusOf(err: unknown): number | undefined {
  return err instanceof gaxios.GaxiosError ? err.response?.status : undefined;
}

function errorBody(err: unknown): GoogleErrorBody | undefined {
  const data = err instanceof gaxios.GaxiosError ? err.response?.data : undefined;
  return typeof data === 'object' && data !== null ? (data as GoogleErrorBody) : undefined;
}

/**
 * Whether the API throttled the call: a 429, or a 403 whose reason is a rate quota. The one test the
 * retry decision, the metrics and the error mapping share, so that a quota 403 is retried, counted
 * `throttled` and reported as rate-limited alike.
 */
function isThrottled(err: unknown): boolean {
  const status = statusOf(err);
  if (status === 429) return true;
  if (status !== 403) return false;
  const errors = errorBody(err)?.error?.errors;
  return Array.isArray(errors) && errors.some((e) => rateQuotaReasons.has(String(e?.reason)));
}

/**
 * How one failed attempt is counted. httpCallResult goes by status, which would count a quota 403
 * `rejected` (a wrong request or permission) when it is throttling.
 */
function attemptResult(err: unknown): CloudCallResult {
  return isThrottled(err) ? 'throttled' : httpCallResult(statusOf(err));
}

/**
 * Whether gaxios retries a failed attempt: throttling ({@link isThrottled}) and server errors (5xx)
 * while retries remain, and an attempt with no answer at all (refused, reset, timed out) at most
 * `noResponseRetries` times, as gaxios does by default; never once the client is closed.
 */
function shouldRetry(err: gaxios.GaxiosError, closed: AbortSignal): boolean {
  const config = err.config?.retryConfig;
  const attempt = config?.currentRetryAttempt ?? 0;
  if (closed.aborted || attempt >= (config?.retry ?? 0)) return false;
  const status = statusOf(err);
  if (status === undefined) return attempt < (config?.noResponseRetries ?? 2);
  return (status >= 500 && status <= 599) || isThrottled(err);
}

/**
 * Maps a failed API call to a typed error naming the call and, for a permission 403, the permission
 * to grant. Throttling is checked first: a quota 403 is a wait, not a permission to grant.
 */
function computeError(operation: string, path: string, err: unknown): KopsError {
  const status = statusOf(err);
  const apiReason = errorBody(err)?.error?.message;
  const reason = apiReason ?? (err instanceof Error ? err.message : String(err));
  const message = `compute ${operation} ${path}: ${reason}`;
  const options = { cause: err, details: { operation, status } };
  if (isThrottled(err)) {
    return new RateLimitedError(`${message}; the compute API quota is exhausted, retry later`, options);
  }
  // A 4xx is a verdict on what was asked only in Google's own error body: with any other (an endpoint
  // that is not the API's, a proxy's page) it is not the API answering, a fault. (401 and 403 are the
  // controller's own credentials, faults already.)
  if (status !== undefined && isVerdictStatus(status) && typeof apiReason !== 'string') {
    return new UnavailableError(
      `${message}; not the compute API's error answer (check the endpoint, and any proxy)`,
      {
        ...options,
        details: { ...options.details, reason: 'not-the-api' },
      },
    );
  }
  switch (status) {
    case 400:
      // A listing's parameters (its filter above all) are the controller's own: the API refusing them
      // says nothing about the instances asked for, so it is a fault, never a verdict on them. A read
      // by name refused is about the name (and zone) the node's providerID gave.
      if (operation.endsWith('.list') || operation.endsWith('.aggregatedList'))
        return new UnavailableError(`${message}; the API refused the controller's own listing`, options);
      return new InvalidInputError(message, options);
    case 401:
      return new UnauthenticatedError(`${message}; check the controller's Google credentials`, options);
    case 403:
      return new ForbiddenError(
        `${message}; grant the controller's service account compute.${operation}`,
        options,
      );
    case 404:
      return new NotFoundError(message, options);
    default:
      return new UnavailableError(message, options);
  }
}
