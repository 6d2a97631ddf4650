/**
 * The Akamai (Linode) instances API through the official SDK, `@linode/api-v4` (`getLinode`,
 * `getLinodes` with an `X-Filter` on the cluster tag, `page`/`page_size` pagination). kops tags each
 * instance `kops.k8s.io/cluster:<cluster>`, `kops.k8s.io/instance-group:<group>` and
 * `kops.k8s.io/instance-role:<role>` (pkg/model/context.go CloudTagsForInstanceGroup).
 *
 * The SDK sends every request through one process-wide axios instance with fixed absolute URLs and a
 * process-wide token. So that each client has its own endpoint (the simulator's in tests), token,
 * deadline and connection pool without forking the SDK, one request interceptor applies the settings
 * of the client whose call is running, found through AsyncLocalStorage; requests made outside a
 * client's call are left alone.
 *
 * Rate limits (https://techdocs.akamai.com/linode-api/reference/rate-limits): per token, 200 requests
 * per minute for paginated collections (`GET /linode/instances`) and 1,600 per minute for other
 * operations (`GET /linode/instances/{id}`); over them the API answers 429 with `Retry-After` and
 * `X-RateLimit-Limit`/`-Remaining`/`-Reset`. A page holds at most 500 instances, so listing a
 * 5,000-instance cluster costs 10 requests.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { Agent as HttpAgent } from 'node:http';
import { isIP } from 'node:net';
import * as linodeSdk from '@linode/api-v4';
import { UnavailableError } from '../../errors.ts';
import { isJsonObject } from '../../json-object.ts';
import { egressAgent } from '../../net/egress-proxy.ts';
import { malformedAnswer } from '../api-answer.ts';
import { cloudTime } from '../cloud-time.ts';
import {
  type CloudServer,
  cloudServer,
  DecimalIds,
  ListingGuard,
  type ServerDirectory,
  type ServerStatuses,
  schemeProviderIds,
  serverOfAnswer,
  serversOfPage,
} from '../cluster-servers.ts';
import {
  type CloudCallRecorder,
  type CloudName,
  httpCallResult,
  noCloudCalls,
  secondsSince,
} from '../metrics.ts';
import { cloudAnswerError, retryAfterWait } from '../rest-json.ts';
import { type CloudRetryPolicy, retryCloudCall } from '../retry.ts';
import { tagValue } from '../server-groups.ts';

/** The public API's origin (the SDK's URLs are `<origin>/v4/...` and `<origin>/v4beta/...`). */
export const defaultLinodeOrigin = 'https://api.linode.com';
/** The tag prefixes naming an instance's cluster and instance group. */
export const linodeClusterTagPrefix = 'kops.k8s.io/cluster:';
export const linodeGroupTagPrefix = 'kops.k8s.io/instance-group:';
/** The largest page the instances list serves. */
export const linodeMaxPageSize = 500;
/** The metrics' name of this cloud. */
export const linodeCloud: CloudName = 'linode';

/** The fields of an instance (the SDK's `Linode`) the controller reads. */
export interface Linode {
  id: number;
  label: string;
  /** running, booting, provisioning, rebooting, shutting_down, offline, stopped, deleting, ... */
  status: string;
  ipv4: string[];
  ipv6: string | null;
  tags: string[];
  region: string;
  /**
   * When the instance was created: UTC without an offset (`2018-01-01T00:01:01`, as the API reference
   * writes every time; linodego's parseabletime reads RFC 3339 first, then that layout as UTC).
   */
  created?: string;
}

/** One page of a collection, as the SDK returns it. */
interface LinodePage<T> {
  data: T[];
  page: number;
  pages: number;
  results: number;
}

/**
 * The SDK calls used, typed here: the package's declaration files re-export its modules by
 * directory (`export * from './linodes'`), which TypeScript's NodeNext resolution does not follow,
 * so only `baseRequest` would be typed. The functions are the SDK's own, called unchanged.
 */
const sdk = linodeSdk as unknown as {
  baseRequest: { interceptors: { request: { use(intercept: (config: SdkRequest) => SdkRequest): number } } };
  getLinode(id: number): Promise<Linode>;
  getLinodes(
    params: { page: number; page_size: number },
    filter: Record<string, string>,
  ): Promise<LinodePage<Linode>>;
};

/** The parts of the SDK's (axios') request config the interceptor sets. */
interface SdkRequest {
  url?: string;
  headers: { set(name: string, value: string): unknown };
  [option: string]: unknown;
}

/** How the SDK (axios) fails: with the answer, when there was one. */
interface SdkFailure {
  isAxiosError: true;
  message: string;
  response?: { status: number; headers: Record<string, unknown>; data: unknown };
}

function isSdkFailure(err: unknown): err is SdkFailure {
  return typeof err === 'object' && err !== null && (err as { isAxiosError?: unknown }).isAxiosError === true;
}

/** The settings of one client, applied to its own SDK calls. */
interface CallSettings {
  origin: string;
  token: string;
  timeoutMs: number;
  agent: HttpAgent;
  /** Aborted by {@link LinodeApi.destroy}. */
  closed: AbortController;
}

const current = new AsyncLocalStorage<CallSettings>();
let interceptorInstalled = false;

/** Installs, once, the interceptor that points the SDK's calls at the running client's endpoint. */
function installInterceptor(): void {
  if (interceptorInstalled) return;
  interceptorInstalled = true;
  sdk.baseRequest.interceptors.request.use((config) => {
    const settings = current.getStore();
    if (!settings) return config;
    config.headers.set('Authorization', `Bearer ${settings.token}`);
    return {
      ...config,
      url: config.url?.replace(/^https:\/\/api\.linode\.com(?=\/v4)/, settings.origin),
      timeout: settings.timeoutMs,
      // A client that trusts one endpoint never talks to another, and reads no answer without bound.
      maxRedirects: 0,
      maxContentLength: 32 * 1024 * 1024,
      httpAgent: settings.agent,
      httpsAgent: settings.agent,
      signal: settings.closed.signal,
    };
  });
}

/** The error envelope: `{ "errors": [{ "reason": "Not found" }] }`. */
export function linodeErrorMessage(body: unknown): string | undefined {
  const reasons = (body as { errors?: Array<{ reason?: unknown; field?: unknown }> } | undefined)?.errors;
  if (!Array.isArray(reasons)) return undefined;
  const words = reasons.filter((e) => typeof e?.reason === 'string').map((e) => String(e.reason));
  return words.length > 0 ? words.join('; ') : undefined;
}

/** Options of {@link LinodeApi}. */
export interface LinodeApiOptions extends Partial<CloudRetryPolicy> {
  token: string;
  /** Default the public API; the simulator's origin in tests. */
  origin?: string;
  /** Deadline of one attempt (default 10 s). */
  timeoutMs?: number;
  cloudCalls?: CloudCallRecorder;
}

/** The SDK calls the controller makes, each with this client's settings, retried and counted. */
export class LinodeApi {
  readonly #settings: CallSettings;
  readonly #retry: CloudRetryPolicy;
  readonly #calls: CloudCallRecorder;

  constructor(options: LinodeApiOptions) {
    installInterceptor();
    const origin = (options.origin ?? defaultLinodeOrigin).replace(/\/$/, '');
    this.#settings = {
      origin,
      token: options.token,
      timeoutMs: options.timeoutMs ?? 10_000,
      agent: egressAgent(origin.startsWith('http:') ? 'http:' : 'https:', { keepAlive: true, maxSockets: 8 }),
      closed: new AbortController(),
    };
    this.#retry = {
      signal: this.#settings.closed.signal,
      retries: options.retries ?? 3,
      retryDelayMs: options.retryDelayMs ?? 200,
      maxRetryWaitMs: options.maxRetryWaitMs ?? 5_000,
    };
    this.#calls = options.cloudCalls ?? noCloudCalls;
  }

  /** Ends the calls in flight, refuses later ones, and closes the kept-alive connections (shutdown). */
  destroy(): void {
    this.#settings.closed.abort(new DOMException('the Linode client was closed', 'AbortError'));
    this.#settings.agent.destroy();
  }

  /** `getLinode`: GET /v4/linode/instances/{id}. */
  getInstance(id: number): Promise<Linode> {
    return this.#call('linode.instances.get', `/linode/instances/${id}`, () => sdk.getLinode(id));
  }

  /** `getLinodes` filtered on one tag: GET /v4beta/linode/instances, one page. */
  listInstancesByTag(tag: string, page: number, pageSize: number) {
    return this.#call('linode.instances.list', '/linode/instances', () =>
      sdk.getLinodes({ page, page_size: pageSize }, { tags: tag }),
    );
  }

  async #call<T>(operation: string, path: string, send: () => Promise<T>): Promise<T> {
    const started = performance.now();
    try {
      return await retryCloudCall(this.#retry, async () => {
        let result: T;
        try {
          result = await current.run(this.#settings, send);
        } catch (err) {
          const response = isSdkFailure(err) ? err.response : undefined;
          this.#calls.request(linodeCloud, operation, httpCallResult(response?.status));
          if (!response) {
            throw new UnavailableError(`the Linode API ${operation}: ${(err as Error).message}`, {
              cause: err,
              details: { operation },
            });
          }
          const headers = Object.fromEntries(
            Object.entries(response.headers).map(([k, v]) => [
              k.toLowerCase(),
              v === undefined ? undefined : String(v),
            ]),
          );
          const wait = response.status === 429 ? (retryAfterWait(headers) ?? 1) : undefined;
          throw cloudAnswerError(
            `the Linode API ${operation} ${path}`,
            operation,
            response.status,
            linodeErrorMessage(response.data),
            wait,
          );
        }
        // The SDK (axios) hands over a 200 whose body is not JSON as its text: no answer at all.
        if (!isJsonObject(result)) {
          this.#calls.request(linodeCloud, operation, 'error');
          throw malformedAnswer(`the Linode API ${operation} ${path}: a 200 whose body is not a JSON object`);
        }
        this.#calls.request(linodeCloud, operation, 'ok');
        return result;
      });
    } finally {
      this.#calls.duration(linodeCloud, operation, secondsSince(started));
    }
  }
}

const linodeStatuses: ServerStatuses = {
  states: {
    provisioning: 'pending',
    booting: 'pending',
    running: 'running',
    rebooting: 'running',
    migrating: 'running',
    shutting_down: 'stopping',
    offline: 'stopped',
    stopped: 'stopped',
    deleting: 'terminated',
  },
  /** The statuses kops' Linode identifier accepts (pkg/nodeidentity/linode/identify.go). */
  live: new Set(['running', 'booting', 'provisioning']),
};

/**
 * Whether an IPv4 address is private: an RFC 1918 range (Go's `IP.IsPrivate`, which kops' verifier
 * uses), or loopback — which no Linode instance lists, but the dev cluster's simulated instances have
 * (each its own 127.x address, where its node answers the callback).
 */
export function isPrivateIPv4(address: string): boolean {
  if (isIP(address) !== 4) return false;
  const [a = 0, b = 0] = address.split('.').map(Number);
  return a === 10 || (a === 172 && b >= 16 && b <= 31) || (a === 192 && b === 168) || a === 127;
}

/**
 * The instance as the identifier sees it: its tags, its IPv4 addresses split private and public, and
 * its SLAAC IPv6 address (`ipv6`, `<address>/128`) as a public one, as the Linode cloud controller
 * manager puts them in the Node's addresses (linode/linode-cloud-controller-manager
 * cloud/linode/services/instances.go getInstanceAddresses), so in the kubelet's serving CSR.
 */
export function linodeCloudServer(instance: Linode): CloudServer {
  const ipv4 = (instance.ipv4 ?? []).filter((ip) => isIP(ip) === 4);
  const ipv6 = typeof instance.ipv6 === 'string' ? instance.ipv6.replace(/\/128$/, '') : '';
  return cloudServer(linodeStatuses, {
    id: instance.id,
    name: instance.label,
    status: instance.status,
    clusterName: tagValue(instance.tags, linodeClusterTagPrefix),
    instanceGroup: tagValue(instance.tags, linodeGroupTagPrefix),
    privateIps: ipv4.filter(isPrivateIPv4),
    publicIps: [...ipv4.filter((ip) => !isPrivateIPv4(ip)), ...(isIP(ipv6) === 6 ? [ipv6] : [])],
    zone: instance.region,
    createdAt: cloudTime(
      instance.created,
      `the record of Linode instance ${instance.id}: its creation time`,
      {
        utcWithoutOffset: true,
      },
    ),
  });
}

/** Linode instance ids: positive decimal integers that fit the SDK's number (kops parses them with Atoi). */
export const linodeIds = new DecimalIds('Linode instance id', 15);

/** `linode://<id>`; kops also reads `linode:///<id>` and `linode://<region>/<id>`. */
export const linodeProviderIds = schemeProviderIds({
  scheme: 'linode',
  cloud: 'Linode',
  idNoun: 'instance id',
  ids: linodeIds,
  lastSegment: true,
});

/** The instances of one cluster through the Linode API. */
export class LinodeInstances implements ServerDirectory {
  readonly pageSize = linodeMaxPageSize;
  readonly #api: LinodeApi;
  readonly #tag: string;

  constructor(api: LinodeApi, clusterName: string) {
    this.#api = api;
    this.#tag = `${linodeClusterTagPrefix}${clusterName}`;
  }

  async get(id: string): Promise<CloudServer> {
    return serverOfAnswer('Linode instance', await this.#api.getInstance(Number(id)), linodeCloudServer);
  }

  /**
   * Every page of the cluster's instances, as many as each page's `pages` says (0 for a filter that
   * matches nothing, with no data): a count that is no whole number, 0 with data, more than
   * {@link ListingGuard.maxPages}, and pages that bring nothing new, end the listing as a malformed
   * answer.
   */
  async listCluster(): Promise<CloudServer[]> {
    const out: CloudServer[] = [];
    const title = 'the Linode API linode.instances.list';
    const guard = new ListingGuard(title, this.pageSize);
    for (let page = 1, pages = 1; page <= pages; page++) {
      const answer = await this.#api.listInstancesByTag(this.#tag, page, this.pageSize);
      const instances = serversOfPage(title, answer, 'data', 'Linode instance', linodeCloudServer);
      const said: unknown = answer.pages;
      const empty = said === 0 && page === 1 && instances.length === 0;
      if (empty) return out;
      if (typeof said !== 'number' || !Number.isSafeInteger(said) || said < 1 || said > guard.maxPages) {
        throw malformedAnswer(
          `${title} answered page ${page} of ${JSON.stringify(said)?.slice(0, 40)} pages`,
        );
      }
      pages = said;
      guard.page(instances, page < pages);
      out.push(...instances);
    }
    return out;
  }
}
