/**
 * The Azure reads kops-controller makes: VM and scale-set VM gets, scale-set VM and scale-set
 * listings, network interfaces and public addresses, as ARM's REST paths sent through
 * `@azure/arm-compute`'s authenticated pipeline (its REST context), and read as raw JSON so that every
 * field is checked as it is read: an answer that cannot be right (another VM than asked for, a nextLink
 * already followed, a page without its list, tags that are not strings, a VM without instance view, a
 * public address that is no IP, a body that is not JSON) is a malformed answer (`malformed-answer`,
 * see docs/clouds.md "When a cloud API answers wrongly"), never a verdict on a node. Every answer is
 * reduced to the few typed facts the controller uses; every failure becomes a typed error (404
 * not-found, 429 rate-limited with ARM's Retry-After, 401/403 forbidden naming the status so it is
 * never taken for a verdict on a node, the rest, 400 included, unavailable). Each HTTP request,
 * retries included, is counted as a cloud call.
 */
import { isIP } from 'node:net';
import type { ComputeManagementClient } from '@azure/arm-compute';
import { type ComputeManagementContext, createComputeManagement } from '@azure/arm-compute/api';
import type { TokenCredential } from '@azure/identity';
import {
  ForbiddenError,
  InvalidInputError,
  KopsError,
  NotFoundError,
  RateLimitedError,
  UnavailableError,
} from '../../errors.ts';
import { isJsonObject } from '../../json-object.ts';
import { type Logger, silentLogger } from '../../log.ts';
import { egressAgent } from '../../net/egress-proxy.ts';
import { isVerdictStatus, malformedAnswer } from '../api-answer.ts';
import { cloudTime } from '../cloud-time.ts';
import {
  type CloudCallRecorder,
  type CloudName,
  httpCallResult,
  noCloudCalls,
  secondsSince,
} from '../metrics.ts';
import type { InstanceState } from '../types.ts';
import { type AzureVmRef, formatAzureVmId, parseAzureVmId, sameAzureName } from './resource-id.ts';
import { azureInstanceGroupTag } from './tags.ts';

/** The public ARM endpoint. */
export const defaultArmEndpoint = 'https://management.azure.com';
/** Compute API version of VM, scale-set VM and scale-set reads (the one the SDK speaks). */
const computeApiVersion = '2026-04-01';
/** VM reads ask for the instance view, which carries the power state, in the same request. */
const expandInstanceView = { $expand: 'instanceView' };
/** Most pages one ARM listing may take (a scale set holds at most 1,000 VMs); more is a broken API. */
const maxListPages = 1_000;
/**
 * Network API version of the scale-set network paths (interfaces, public addresses): the one these
 * Microsoft.Compute-scoped paths serve, as @azure/arm-network sends it for them (its `apiVersion1`
 * parameter, a constant) and Azure/azure-sdk-for-js' arm-network-rest samples do.
 */
const scaleSetNetworkApiVersion = '2018-10-01';
/** Network API version of standalone NICs and the resource group's public addresses. */
const networkApiVersion = '2024-05-01';
/** The `cloud` label of every call this client counts. */
const azure: CloudName = 'azure';
/**
 * How long one ARM request may wait for its answer, if its caller set no shorter timeout. The SDK's
 * default is none: an endpoint that accepted the connection and never answered held the call, and its
 * socket kept the process alive after its shutdown.
 */
const defaultRequestTimeoutMs = 20_000;

/** The SDK's client options (its pipeline's, without naming the transitive pipeline package). */
type ClientOptions = NonNullable<ConstructorParameters<typeof ComputeManagementClient>[2]>;

/** A VM or scale-set VM as the controller sees it. */
export interface AzureVm {
  ref: AzureVmRef;
  /** Azure's unique id of this VM incarnation (what attested documents name). */
  vmId: string;
  /**
   * When the VM resource was created (`properties.timeCreated`, in VMs' and scale-set VMs' records
   * alike since api-version 2021-11-01); undefined when ARM's record has none.
   */
  timeCreated?: Date;
  computerName: string | undefined;
  tags: Record<string, string>;
  state: InstanceState;
  /** Resource ids of its network interfaces, primary first. */
  nicIds: string[];
  /** False when a scale-set VM runs an older model than its set (a rolling update is due). */
  latestModelApplied: boolean | undefined;
}

/** An IP configuration of a network interface. */
export interface AzureIpConfig {
  /** Its resource id (what a public address's `ipConfiguration.id` names). */
  id: string | undefined;
  privateIp: string | undefined;
  /** Resource id of the public address bound to it, if any. */
  publicIpId: string | undefined;
}

/** A network interface: the VM it is attached to and its addresses. */
export interface AzureNic {
  id: string;
  /** Resource id of the VM it is attached to. */
  attachedTo: string | undefined;
  /** Whether it is its VM's primary interface (ARM's own `properties.primary`). */
  primary: boolean;
  /** Its IP configurations, the primary one first. */
  ipConfigs: AzureIpConfig[];
  /** The private addresses of its IP configurations, the primary one's first. */
  privateIps: string[];
}

/** A public address: the address and the IP configuration it is bound to. */
export interface AzurePublicIp {
  id: string;
  /** Undefined while a dynamic address is not allocated yet. */
  address: string | undefined;
  /** Resource id of the IP configuration it is bound to (undefined: bound to none). */
  ipConfigurationId: string | undefined;
}

/** A scale set. */
export interface AzureScaleSet {
  name: string;
  tags: Record<string, string>;
  capacity: number;
}

/** Options of {@link AzureClient}. */
export interface AzureClientOptions {
  subscriptionId: string;
  resourceGroup: string;
  credential: TokenCredential;
  /** ARM's base URL (default the public cloud's). */
  endpoint?: string;
  /** Extra CA certificates (PEM) to trust for ARM's TLS, e.g. a simulator's. */
  caPem?: string;
  /** Retries of the SDK's pipeline for throttling and 5xx (default 3). */
  maxRetries?: number;
  /** How long one request may wait for its answer (default 20 s). */
  requestTimeoutMs?: number;
  cloudCalls?: CloudCallRecorder;
}

/** The SDK call an ARM request URL is, for the cloud-call metrics (bounded names, never ids). */
export function azureOperationOf(url: string): string {
  const path = new URL(url).pathname.toLowerCase();
  const compute = /\/providers\/microsoft\.compute\/(.*)$/.exec(path)?.[1] ?? '';
  if (/^virtualmachinescalesets\/[^/]+\/virtualmachines\/[^/]+\/networkinterfaces\/[^/]+$/.test(compute))
    return 'networkInterfaces.getVirtualMachineScaleSetNetworkInterface';
  if (/^virtualmachinescalesets\/[^/]+\/networkinterfaces$/.test(compute))
    return 'networkInterfaces.listVirtualMachineScaleSetNetworkInterfaces';
  if (/^virtualmachinescalesets\/[^/]+\/publicipaddresses$/.test(compute))
    return 'publicIPAddresses.listVirtualMachineScaleSetPublicIPAddresses';
  if (/^virtualmachinescalesets\/[^/]+\/virtualmachines\/[^/]+$/.test(compute))
    return 'virtualMachineScaleSetVMs.get';
  if (/^virtualmachinescalesets\/[^/]+\/virtualmachines$/.test(compute))
    return 'virtualMachineScaleSetVMs.list';
  if (/^virtualmachinescalesets$/.test(compute)) return 'virtualMachineScaleSets.list';
  if (/^virtualmachines\/[^/]+$/.test(compute)) return 'virtualMachines.get';
  if (/\/providers\/microsoft\.network\/networkinterfaces\/[^/]+$/.test(path)) return 'networkInterfaces.get';
  if (/\/providers\/microsoft\.network\/publicipaddresses$/.test(path)) return 'publicIPAddresses.list';
  return 'other';
}

const stateByPower: Record<string, InstanceState> = {
  starting: 'pending',
  running: 'running',
  stopping: 'stopping',
  deallocating: 'stopping',
  stopped: 'stopped',
  deallocated: 'stopped',
};

/**
 * A nextLink with every parameter of the listing it lacks added: an `api-version`, as the SDK's paging
 * adds it (@azure/arm-compute static-helpers/pagingHelpers.js addApiVersionToUrl), since ARM refuses a
 * request without one; a `$expand`, without which the next page's VMs would come without the
 * instance views their state is read from. The link is otherwise sent as ARM wrote it (its skiptoken
 * untouched: appended to, never re-encoded). The names are the listing's own (`api-version`,
 * `$expand`), written as ARM writes them.
 */
function withListingQuery(link: string, query: Record<string, string>): string {
  const present = new URL(link).searchParams;
  let out = link;
  for (const [name, value] of Object.entries(query)) {
    if (present.has(name)) continue;
    out += `${out.includes('?') ? '&' : '?'}${name}=${encodeURIComponent(value)}`;
  }
  return out;
}

/**
 * The state an instance view's `PowerState/<x>` status says. A VM being created has only a
 * `ProvisioningState/…` status: unknown. A VM being deleted comes without instance view even when
 * asked for one (its `provisioningState` is `Deleting`: kubernetes-sigs/cloud-provider-azure reads
 * such VMs so): stopping, whatever else the listing holds. Otherwise, asked with
 * `$expand=instanceView`, an answer without an instance view, without a list of statuses, or with
 * neither status is a malformed answer (not a VM that is not running).
 */
function stateOf(instanceView: unknown, provisioningState: unknown, what: string): InstanceState {
  const view = optionalObject(instanceView, `${what}: its instance view`);
  const statuses = view?.['statuses'];
  const deleting = typeof provisioningState === 'string' && provisioningState.toLowerCase() === 'deleting';
  if (deleting && (statuses === undefined || statuses === null)) return 'stopping';
  if (!Array.isArray(statuses)) throw malformedAnswer(`${what} has no instance view statuses`);
  const codes = statuses.map((s) => {
    const code = isJsonObject(s) ? s['code'] : undefined;
    if (typeof code !== 'string') throw malformedAnswer(`${what}: an instance view status without a code`);
    return code;
  });
  const power = codes.find((c) => c.startsWith('PowerState/'))?.slice('PowerState/'.length);
  if (power === undefined && !codes.some((c) => c.startsWith('ProvisioningState/'))) {
    throw malformedAnswer(`${what}: its instance view has neither a power nor a provisioning state`);
  }
  return (
    (power && Object.hasOwn(stateByPower, power.toLowerCase()) && stateByPower[power.toLowerCase()]) ||
    'unknown'
  );
}

/** The tags of a record: absent is none; anything but an object of strings is a malformed answer. */
function tagsOf(tags: unknown, what: string): Record<string, string> {
  if (tags === undefined || tags === null) return {};
  if (!isJsonObject(tags)) throw malformedAnswer(`${what}: its tags are not an object`);
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(tags)) {
    if (typeof v !== 'string')
      throw malformedAnswer(`${what}: its tag ${JSON.stringify(k.slice(0, 80))} is not a string`);
    out[k] = v;
  }
  return out;
}

/** Whether an answer's text is JSON (a body not read as text, a stream, is not judged here). */
function parsesAsJson(text: string | null | undefined): boolean {
  if (text === undefined || text === null) return true;
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

/** What ARM answered to a failed request (absent status: no answer at all). */
interface ArmFailure {
  status: number | undefined;
  code: string;
  message: string;
  retryAfter: string | undefined;
}

/** The typed error for an ARM failure. */
function armError(what: string, failure: ArmFailure, cause: unknown): KopsError {
  const { status, code } = failure;
  const message = `${what}: ${status ? `HTTP ${status} ` : ''}${code ? `${code} ` : ''}${failure.message.slice(0, 300)}`;
  const details = { status, code };
  // A 404 is a verdict (no such VM) only in ARM's own error body, which names a code: with any other
  // (an endpoint that is not ARM's, a proxy's page) it is not ARM answering, a fault. (Every other 4xx
  // but 404 is a fault below anyway.)
  if (status !== undefined && isVerdictStatus(status) && !code) {
    return new UnavailableError(`${message}; not ARM's error answer (check the endpoint, and any proxy)`, {
      cause,
      details: { ...details, reason: 'not-the-api' },
    });
  }
  if (status === 404) return new NotFoundError(message, { cause, details });
  if (status === 429) {
    const retryAfter = Number(failure.retryAfter);
    return new RateLimitedError(message, {
      cause,
      details: { ...details, ...(Number.isFinite(retryAfter) ? { retryAfterSeconds: retryAfter } : {}) },
    });
  }
  if (status === 401 || status === 403) return new ForbiddenError(message, { cause, details });
  // A 400 refuses the controller's own request, never a node: every id is checked before it is sent,
  // and ARM answers 400 for an api-version it does not serve in this region or cloud yet
  // (NoRegisteredProviderFound), or a query it does not take. A fault (retried), not a verdict.
  return new UnavailableError(message, { cause, details });
}

/** The typed error for a failed SDK call (a RestError, or no answer at all); typed errors pass. */
export function azureError(err: unknown, what: string): KopsError {
  if (err instanceof KopsError) return err;
  const e = err as {
    statusCode?: number;
    code?: string;
    message?: string;
    response?: { headers?: { get(name: string): string | undefined } };
  };
  return armError(
    what,
    {
      status: typeof e?.statusCode === 'number' ? e.statusCode : undefined,
      code: e?.code ?? '',
      message: e?.message ?? String(err),
      retryAfter: e?.response?.headers?.get('retry-after'),
    },
    err,
  );
}

/** Typed reads of one subscription and resource group. */
export class AzureClient {
  readonly subscriptionId: string;
  readonly resourceGroup: string;
  readonly #rest: ComputeManagementContext;
  readonly #cloudCalls: CloudCallRecorder;
  readonly #origin: string;
  /** Aborted by {@link close}: every call in flight ends, and every later one fails at once. */
  readonly #closed = new AbortController();

  constructor(options: AzureClientOptions) {
    this.subscriptionId = options.subscriptionId;
    this.resourceGroup = options.resourceGroup;
    this.#cloudCalls = options.cloudCalls ?? noCloudCalls;
    const endpoint = options.endpoint ?? defaultArmEndpoint;
    this.#origin = new URL(endpoint).origin;
    const recorder = this.#cloudCalls;
    const requestTimeoutMs = options.requestTimeoutMs ?? defaultRequestTimeoutMs;
    const closed = this.#closed.signal;
    const clientOptions: ClientOptions = {
      endpoint,
      retryOptions: { maxRetries: options.maxRetries ?? 3 },
      // The egress proxy as every client honours it (src/net/egress-proxy.ts): with an agent of its
      // own, the pipeline's proxyPolicy (its own reading of the variables, without CIDRs) stands aside.
      agent: egressAgent(new URL(endpoint).protocol, {
        keepAlive: true,
        ...(options.caPem ? { ca: options.caPem } : {}),
      }),
      ...(options.caPem ? { tlsOptions: { ca: options.caPem } } : {}),
      additionalPolicies: [
        {
          // Per call: the retry policy sends the same request again, with the same timeout per attempt.
          position: 'perCall' as const,
          policy: {
            name: 'kopsRequestTimeout',
            sendRequest(request, next) {
              if (!(request.timeout > 0 && request.timeout <= requestTimeoutMs))
                request.timeout = requestTimeoutMs;
              // Closing the client ends the call; the retry policy does not retry an aborted one.
              closed.throwIfAborted();
              request.abortSignal = request.abortSignal
                ? AbortSignal.any([request.abortSignal as AbortSignal, closed])
                : closed;
              return next(request);
            },
          },
        },
        {
          position: 'perRetry' as const,
          policy: {
            name: 'kopsCloudCallCounter',
            async sendRequest(request, next) {
              const operation = azureOperationOf(request.url);
              try {
                const response = await next(request);
                // A 200 whose body is not JSON (truncated, a proxy's HTML page) is no usable answer.
                const unusable = response.status === 200 && !parsesAsJson(response.bodyAsText);
                recorder.request(azure, operation, unusable ? 'error' : httpCallResult(response.status));
                return response;
              } catch (err) {
                recorder.request(
                  azure,
                  operation,
                  httpCallResult((err as { statusCode?: number }).statusCode),
                );
                throw err;
              }
            },
          },
        },
      ],
    };
    this.#rest = createComputeManagement(options.credential, options.subscriptionId, clientOptions);
  }

  /**
   * Ends every call in flight and refuses later ones (the controller is stopping): a call waiting on a
   * slow ARM endpoint would otherwise hold the process open until its timeout.
   */
  close(): void {
    this.#closed.abort(
      new DOMException('the Azure client was closed (the controller is stopping)', 'AbortError'),
    );
  }

  /**
   * A VM or scale-set VM with its instance view (hence its power state). An answer naming another
   * VM than the one asked for (a proxy or API mixing up answers) is a malformed answer, never that VM.
   */
  async getVm(ref: AzureVmRef): Promise<AzureVm> {
    const asked = formatAzureVmId(ref);
    return this.#timed('getVm', `get ${asked}`, async () => {
      const vm = this.#vm(await this.#get(asked, computeApiVersion, expandInstanceView));
      if (formatAzureVmId(vm.ref).toLowerCase() !== asked.toLowerCase()) {
        throw malformedAnswer(`ARM answered the read of VM ${asked} with VM ${formatAzureVmId(vm.ref)}`);
      }
      return vm;
    });
  }

  /**
   * Every VM of a scale set, with instance views, following nextLink. A listing that carries a VM of
   * another scale set is a malformed answer. (The same VM may come twice: {@link vmsByInstanceId}.)
   */
  async listScaleSetVms(scaleSet: string): Promise<AzureVm[]> {
    const path = `${this.#providers}/Microsoft.Compute/virtualMachineScaleSets/${encodeURIComponent(scaleSet)}/virtualMachines`;
    const title = `the VM listing of scale set ${scaleSet}`;
    return this.#timed('listScaleSetVms', `list the VMs of scale set ${scaleSet}`, async () => {
      const vms = (await this.#pages(path, computeApiVersion, title, expandInstanceView)).map((raw) =>
        this.#vm(raw),
      );
      for (const vm of vms) {
        if (vm.ref.kind !== 'vmss-vm' || !sameAzureName(vm.ref.scaleSet ?? '', scaleSet)) {
          throw malformedAnswer(`${title} carries ${formatAzureVmId(vm.ref)}, which is not one of its VMs`);
        }
      }
      return vms;
    });
  }

  /** The scale sets of the resource group, following nextLink. */
  async listScaleSets(): Promise<AzureScaleSet[]> {
    const path = `${this.#providers}/Microsoft.Compute/virtualMachineScaleSets`;
    return this.#timed('listScaleSets', 'list scale sets', async () =>
      (await this.#pages(path, computeApiVersion, 'the scale set listing')).map(scaleSetOf),
    );
  }

  /**
   * A network interface by resource id (it must be in our subscription and resource group). An
   * answer naming another interface is a malformed answer, never that interface's addresses.
   */
  async getNic(nicId: string): Promise<AzureNic> {
    const path = nicId.split('?')[0] as string;
    const scoped =
      `/subscriptions/${this.subscriptionId}/resourcegroups/${this.resourceGroup}/providers/`.toLowerCase();
    if (!path.toLowerCase().startsWith(scoped) || path.includes('..')) {
      throw new InvalidInputError(
        `network interface ${nicId} is outside resource group ${this.resourceGroup}`,
      );
    }
    const apiVersion = /\/virtualmachinescalesets\//i.test(path)
      ? scaleSetNetworkApiVersion
      : networkApiVersion;
    return this.#timed('getNic', `get network interface ${path}`, async () => {
      const nic = nicOf(await this.#get(path, apiVersion));
      if (nic.id.toLowerCase() !== path.toLowerCase()) {
        throw malformedAnswer(`ARM answered the read of network interface ${path} with ${nic.id}`);
      }
      return nic;
    });
  }

  /** The network interfaces of every VM of a scale set, following nextLink. */
  async listScaleSetNics(scaleSet: string): Promise<AzureNic[]> {
    const path = `${this.#providers}/Microsoft.Compute/virtualMachineScaleSets/${encodeURIComponent(scaleSet)}/networkInterfaces`;
    return this.#timed('listScaleSetNics', `list the network interfaces of scale set ${scaleSet}`, async () =>
      (
        await this.#pages(
          path,
          scaleSetNetworkApiVersion,
          `the network interface listing of scale set ${scaleSet}`,
        )
      ).map(nicOf),
    );
  }

  /**
   * The public addresses of every VM of a scale set, following nextLink: Microsoft.Network's
   * `PublicIPAddresses_ListVirtualMachineScaleSetPublicIPAddresses` (Azure/azure-rest-api-specs
   * specification/network/resource-manager/Microsoft.Network/stable/2024-05-01/vmssPublicIpAddress.json,
   * `GET …/Microsoft.Compute/virtualMachineScaleSets/{vmss}/publicipaddresses`, x-ms-pageable by
   * nextLink; each item a PublicIPAddress: `properties.ipAddress`, `properties.ipConfiguration.id`, as
   * examples/VmssPublicIpListAll.json shows). One listing for the whole set, where the
   * cloud-controller-manager GETs each VM's (pkg/provider/azure_vmss.go `getVMSSPublicIPAddress`).
   */
  async listScaleSetPublicIps(scaleSet: string): Promise<AzurePublicIp[]> {
    const path = `${this.#providers}/Microsoft.Compute/virtualMachineScaleSets/${encodeURIComponent(scaleSet)}/publicipaddresses`;
    return this.#timed(
      'listScaleSetPublicIps',
      `list the public addresses of scale set ${scaleSet}`,
      async () =>
        (
          await this.#pages(
            path,
            scaleSetNetworkApiVersion,
            `the public address listing of scale set ${scaleSet}`,
          )
        ).map(publicIpOf),
    );
  }

  /**
   * The public addresses of the resource group, following nextLink (`PublicIPAddresses_List`,
   * publicIpAddress.json in the same specification): standalone VMs' addresses are resources of the
   * group, which the cloud-controller-manager reads there too (azure_standard.go `GetIPByNodeName`).
   */
  async listPublicIps(): Promise<AzurePublicIp[]> {
    const path = `${this.#providers}/Microsoft.Network/publicIPAddresses`;
    return this.#timed('listPublicIps', 'list public addresses', async () =>
      (await this.#pages(path, networkApiVersion, 'the public address listing')).map(publicIpOf),
    );
  }

  /** `/subscriptions/<s>/resourceGroups/<rg>/providers`. */
  get #providers(): string {
    return `/subscriptions/${this.subscriptionId}/resourceGroups/${this.resourceGroup}/providers`;
  }

  /**
   * Every item of an ARM listing, following nextLink. A page without its `value` list (a 200 carrying
   * an error), a nextLink already followed (repeated, or a cycle) and more than {@link maxListPages}
   * pages are malformed answers: the listing ends instead of looping or growing without bound. Our
   * bearer token goes only to the ARM endpoint we were configured with.
   */
  async #pages(
    path: string,
    apiVersion: string,
    title: string,
    query: Record<string, string> = {},
  ): Promise<unknown[]> {
    const items: unknown[] = [];
    const followed = new Set<string>();
    let next: string | undefined;
    for (let pages = 1; ; pages++) {
      const page = await this.#get(next ?? path, apiVersion, next ? {} : query);
      const value = isJsonObject(page) ? page['value'] : undefined;
      if (!Array.isArray(value)) {
        throw malformedAnswer(
          `${title}: ARM answered a page without a value list (a 200 carrying an error?)`,
        );
      }
      items.push(...value);
      const link = isJsonObject(page) ? page['nextLink'] : undefined;
      if (link === undefined || link === null || link === '') return items;
      if (typeof link !== 'string' || !URL.canParse(link)) {
        throw malformedAnswer(`${title}: ARM answered a nextLink that is no URL`);
      }
      if (new URL(link).origin !== this.#origin) {
        throw malformedAnswer(`${title}: ARM returned a nextLink outside ${this.#origin}`);
      }
      if (followed.has(link) || pages >= maxListPages) {
        throw malformedAnswer(
          `${title}: ARM answered ${followed.has(link) ? 'a nextLink it already answered' : `more than ${maxListPages} pages`} (page ${pages}); the listing is abandoned`,
        );
      }
      followed.add(link);
      next = withListingQuery(link, { ...query, 'api-version': apiVersion });
    }
  }

  /** One GET; a 200 whose body is no JSON object is a malformed answer. */
  async #get(pathOrUrl: string, apiVersion: string, query: Record<string, string> = {}): Promise<unknown> {
    // A followed nextLink is a whole URL and carries its own query (withListingQuery); a path gets ours.
    const absolute = /^https?:\/\//.test(pathOrUrl);
    const what = `GET ${new URL(pathOrUrl, this.#origin).pathname}`;
    let response: Awaited<ReturnType<ReturnType<ComputeManagementContext['pathUnchecked']>['get']>>;
    try {
      response = await this.#rest
        .pathUnchecked(pathOrUrl)
        .get(absolute ? {} : { queryParameters: { 'api-version': apiVersion, ...query } });
    } catch (err) {
      if ((err as { code?: unknown })?.code === 'PARSE_ERROR') {
        throw malformedAnswer(`${what}: ARM answered a body that is not JSON`);
      }
      throw err;
    }
    const status = Number(response.status);
    if (status !== 200) {
      const body = response.body as { error?: { code?: string; message?: string } } | undefined;
      const failure = {
        status,
        code: body?.error?.code ?? '',
        message: body?.error?.message ?? `HTTP ${status}`,
        retryAfter: response.headers['retry-after'],
      };
      throw armError(what, failure, undefined);
    }
    if (!isJsonObject(response.body))
      throw malformedAnswer(`${what}: ARM answered a 200 that is no JSON object`);
    return response.body;
  }

  async #timed<T>(call: string, what: string, work: () => Promise<T>): Promise<T> {
    const started = performance.now();
    try {
      return await work();
    } catch (err) {
      throw azureError(err, what);
    } finally {
      this.#cloudCalls.duration(azure, call, secondsSince(started));
    }
  }

  /** The VM of an answer, checked as it is read; a record of the wrong shape is a malformed answer. */
  #vm(raw: unknown): AzureVm {
    if (!isJsonObject(raw)) throw malformedAnswer('ARM answered a VM record that is no object');
    const id = raw['id'];
    const properties = raw['properties'];
    if (
      typeof id !== 'string' ||
      !isJsonObject(properties) ||
      typeof properties['vmId'] !== 'string' ||
      !properties['vmId']
    ) {
      throw malformedAnswer('ARM answered a VM record without id, properties or vmId');
    }
    let ref: AzureVmRef;
    try {
      ref = parseAzureVmId(id);
    } catch (err) {
      throw malformedAnswer(
        `ARM answered a VM whose id ${JSON.stringify(id.slice(0, 200))} names no VM: ${(err as Error).message}`,
      );
    }
    if (
      !sameAzureName(ref.subscriptionId, this.subscriptionId) ||
      !sameAzureName(ref.resourceGroup, this.resourceGroup)
    ) {
      throw new UnavailableError(`ARM returned VM ${id} outside resource group ${this.resourceGroup}`, {
        details: { reason: 'malformed-answer' },
      });
    }
    const what = `ARM's record of VM ${id}`;
    const osProfile = optionalObject(properties['osProfile'], `${what}: its osProfile`);
    const networkProfile = optionalObject(properties['networkProfile'], `${what}: its networkProfile`);
    const nics = optionalArray(networkProfile?.['networkInterfaces'], `${what}: its network interfaces`).map(
      (n) => {
        if (!isJsonObject(n) || typeof n['id'] !== 'string') {
          throw malformedAnswer(`${what}: a network interface without an id`);
        }
        const nicProperties = optionalObject(n['properties'], `${what}: a network interface's properties`);
        return { id: n['id'], primary: nicProperties?.['primary'] === true };
      },
    );
    const latestModelApplied = properties['latestModelApplied'];
    if (
      latestModelApplied !== undefined &&
      latestModelApplied !== null &&
      typeof latestModelApplied !== 'boolean'
    ) {
      throw malformedAnswer(`${what}: latestModelApplied is not a boolean`);
    }
    // ARM writes its times in UTC, sometimes without the offset (see CloudTimeFormat).
    const timeCreated = cloudTime(properties['timeCreated'], `${what}: its timeCreated`, {
      utcWithoutOffset: true,
    });
    return {
      ref,
      vmId: properties['vmId'],
      ...(timeCreated ? { timeCreated } : {}),
      computerName: optionalString(osProfile?.['computerName'], `${what}: its computer name`),
      tags: tagsOf(raw['tags'], what),
      state: stateOf(properties['instanceView'], properties['provisioningState'], what),
      nicIds: [...nics.filter((n) => n.primary), ...nics.filter((n) => !n.primary)].map((n) => n.id),
      latestModelApplied: typeof latestModelApplied === 'boolean' ? latestModelApplied : undefined,
    };
  }
}

/**
 * A scale set's VMs by instance id. The same VM listed twice with different records (a paging
 * glitch, a proxy mixing answers) is believed in neither: its entry is a malformed answer. Identical
 * repeats are one VM.
 */
export function vmsByInstanceId(
  vms: readonly AzureVm[],
  logger: Logger = silentLogger,
): Map<string, AzureVm | Error> {
  const out = new Map<string, AzureVm | Error>();
  for (const vm of vms) {
    const key = (vm.ref.instanceId ?? vm.ref.name).toLowerCase();
    const before = out.get(key);
    if (before === undefined) out.set(key, vm);
    else if (!(before instanceof Error) && JSON.stringify(before) !== JSON.stringify(vm)) {
      logger.warn(
        { vm: vm.ref.name, groups: [before.tags[azureInstanceGroupTag], vm.tags[azureInstanceGroupTag]] },
        'the scale set listing holds a VM twice with different records; it is not identified until ARM agrees with itself',
      );
      out.set(
        key,
        malformedAnswer(
          `the listing of scale set ${vm.ref.scaleSet} holds VM ${vm.ref.name} twice, with different records (vmId ${before.vmId} and ${vm.vmId}, instance group ${JSON.stringify(before.tags[azureInstanceGroupTag])} and ${JSON.stringify(vm.tags[azureInstanceGroupTag])})`,
        ),
      );
    }
  }
  return out;
}

function optionalObject(value: unknown, what: string): Record<string, unknown> | undefined {
  if (value === undefined || value === null) return undefined;
  if (!isJsonObject(value)) throw malformedAnswer(`${what} is not an object`);
  return value;
}

function optionalArray(value: unknown, what: string): unknown[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) throw malformedAnswer(`${what} is not a list`);
  return value;
}

function optionalString(value: unknown, what: string): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'string') throw malformedAnswer(`${what} is not a string`);
  return value;
}

/** A scale set of a listing. */
function scaleSetOf(raw: unknown): AzureScaleSet {
  if (!isJsonObject(raw) || typeof raw['name'] !== 'string' || !raw['name']) {
    throw malformedAnswer('ARM answered a scale set record without a name');
  }
  const what = `ARM's record of scale set ${raw['name']}`;
  const capacity = optionalObject(raw['sku'], `${what}: its sku`)?.['capacity'] ?? 0;
  if (typeof capacity !== 'number' || !Number.isSafeInteger(capacity) || capacity < 0) {
    throw malformedAnswer(`${what}: its capacity is not a count`);
  }
  return { name: raw['name'], tags: tagsOf(raw['tags'], what), capacity };
}

/** A network interface of an answer. */
function nicOf(raw: unknown): AzureNic {
  if (!isJsonObject(raw) || typeof raw['id'] !== 'string' || !raw['id']) {
    throw malformedAnswer('ARM answered a network interface record without an id');
  }
  const what = `ARM's record of network interface ${raw['id']}`;
  const properties = optionalObject(raw['properties'], `${what}: its properties`);
  const attachedTo = optionalObject(properties?.['virtualMachine'], `${what}: its VM`)?.['id'];
  const configs = optionalArray(properties?.['ipConfigurations'], `${what}: its IP configurations`).map(
    (c) => {
      const config = optionalObject(isJsonObject(c) ? c['properties'] : c, `${what}: an IP configuration`);
      const publicIp = optionalObject(config?.['publicIPAddress'], `${what}: a public address reference`);
      return {
        id: optionalString(isJsonObject(c) ? c['id'] : undefined, `${what}: an IP configuration's id`),
        privateIp: optionalString(config?.['privateIPAddress'], `${what}: a private address`),
        publicIpId: optionalString(publicIp?.['id'], `${what}: a public address reference's id`),
        primary: config?.['primary'] === true,
      };
    },
  );
  const ordered = [...configs.filter((c) => c.primary), ...configs.filter((c) => !c.primary)];
  return {
    id: raw['id'],
    attachedTo: optionalString(attachedTo, `${what}: its VM's id`),
    primary: properties?.['primary'] === true,
    ipConfigs: ordered.map(({ id, privateIp, publicIpId }) => ({ id, privateIp, publicIpId })),
    privateIps: ordered.flatMap((c) => (c.privateIp ? [c.privateIp] : [])),
  };
}

/**
 * A public address of a listing. Its address is absent while a dynamic one is not allocated (the
 * cloud-controller-manager then reports none either); one that is there but is no IP is an answer
 * that cannot be read, a malformed answer: neither taken for the VM nor silently left out.
 */
function publicIpOf(raw: unknown): AzurePublicIp {
  if (!isJsonObject(raw) || typeof raw['id'] !== 'string' || !raw['id']) {
    throw malformedAnswer('ARM answered a public address record without an id');
  }
  const what = `ARM's record of public address ${raw['id']}`;
  const properties = optionalObject(raw['properties'], `${what}: its properties`);
  const address = optionalString(properties?.['ipAddress'], `${what}: its address`);
  if (address !== undefined && !isIP(address)) {
    throw malformedAnswer(`${what}: its address ${JSON.stringify(address.slice(0, 60))} is no IP`);
  }
  const config = optionalObject(properties?.['ipConfiguration'], `${what}: its IP configuration`);
  return {
    id: raw['id'],
    address,
    ipConfigurationId: optionalString(config?.['id'], `${what}: its IP configuration's id`),
  };
}
