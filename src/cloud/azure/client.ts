/**
 * The Azure reads kops-controller makes, through `@azure/arm-compute` (VM and scale-set VM gets,
 * scale-set VM and scale-set listings, paged by the SDK) and, for network interfaces (which the
 * compute SDK does not cover), ARM's REST paths sent through the same authenticated pipeline. Every
 * answer is reduced to the few typed facts the controller uses; every failure becomes a typed error
 * (404 not-found, 429 rate-limited with ARM's Retry-After, 401/403 forbidden naming the status so it
 * is never taken for a verdict on a node, the rest unavailable). Each HTTP request, retries included,
 * is counted as a cloud call.
 */
import { ComputeManagementClient } from '@azure/arm-compute';
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
import { egressAgent } from '../../net/egress-proxy.ts';
import {
  type CloudCallRecorder,
  type CloudName,
  httpCallResult,
  noCloudCalls,
  secondsSince,
} from '../metrics.ts';
import type { InstanceState } from '../types.ts';
import { type AzureVmRef, formatAzureVmId, parseAzureVmId, sameAzureName } from './resource-id.ts';

/** The public ARM endpoint. */
export const defaultArmEndpoint = 'https://management.azure.com';
/** Network API version of scale-set NIC paths (the one these Microsoft.Compute-scoped paths serve). */
const scaleSetNicApiVersion = '2018-10-01';
/** Network API version of standalone NICs. */
const nicApiVersion = '2024-05-01';
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
  computerName: string | undefined;
  tags: Record<string, string>;
  state: InstanceState;
  /** Resource ids of its network interfaces, primary first. */
  nicIds: string[];
  /** False when a scale-set VM runs an older model than its set (a rolling update is due). */
  latestModelApplied: boolean | undefined;
}

/** A network interface: the VM it is attached to and its private addresses. */
export interface AzureNic {
  id: string;
  /** Resource id of the VM it is attached to. */
  attachedTo: string | undefined;
  privateIps: string[];
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
  if (/^virtualmachinescalesets\/[^/]+\/virtualmachines\/[^/]+$/.test(compute))
    return 'virtualMachineScaleSetVMs.get';
  if (/^virtualmachinescalesets\/[^/]+\/virtualmachines$/.test(compute))
    return 'virtualMachineScaleSetVMs.list';
  if (/^virtualmachinescalesets$/.test(compute)) return 'virtualMachineScaleSets.list';
  if (/^virtualmachines\/[^/]+$/.test(compute)) return 'virtualMachines.get';
  if (/\/providers\/microsoft\.network\/networkinterfaces\/[^/]+$/.test(path)) return 'networkInterfaces.get';
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

/** The state an instance view's `PowerState/<x>` status says; unknown without one. */
function stateOf(statuses: readonly { code?: string }[] | undefined): InstanceState {
  const power = statuses?.find((s) => s.code?.startsWith('PowerState/'))?.code?.slice('PowerState/'.length);
  return (power && stateByPower[power.toLowerCase()]) || 'unknown';
}

function tagsOf(tags: Record<string, string | undefined> | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(tags ?? {})) if (typeof v === 'string') out[k] = v;
  return out;
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
  if (status === 404) return new NotFoundError(message, { cause, details });
  if (status === 429) {
    const retryAfter = Number(failure.retryAfter);
    return new RateLimitedError(message, {
      cause,
      details: { ...details, ...(Number.isFinite(retryAfter) ? { retryAfterSeconds: retryAfter } : {}) },
    });
  }
  if (status === 401 || status === 403) return new ForbiddenError(message, { cause, details });
  if (status === 400) return new InvalidInputError(message, { cause, details });
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
  readonly #compute: ComputeManagementClient;
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
                recorder.request(azure, operation, httpCallResult(response.status));
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
    this.#compute = new ComputeManagementClient(options.credential, options.subscriptionId, clientOptions);
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

  /** A VM or scale-set VM with its instance view (hence its power state). */
  async getVm(ref: AzureVmRef): Promise<AzureVm> {
    return this.#timed('getVm', `get ${formatAzureVmId(ref)}`, async () => {
      const raw =
        ref.kind === 'vm'
          ? await this.#compute.virtualMachines.get(this.resourceGroup, ref.name, { expand: 'instanceView' })
          : await this.#compute.virtualMachineScaleSetVMs.get(
              this.resourceGroup,
              ref.scaleSet as string,
              ref.instanceId as string,
              { expand: 'instanceView' },
            );
      return this.#vm(raw as RawVm);
    });
  }

  /** Every VM of a scale set, with instance views, following nextLink. */
  async listScaleSetVms(scaleSet: string): Promise<AzureVm[]> {
    return this.#timed('listScaleSetVms', `list the VMs of scale set ${scaleSet}`, async () => {
      const out: AzureVm[] = [];
      for await (const raw of this.#compute.virtualMachineScaleSetVMs.list(this.resourceGroup, scaleSet, {
        expand: 'instanceView',
      })) {
        out.push(this.#vm(raw as RawVm));
      }
      return out;
    });
  }

  /** The scale sets of the resource group. */
  async listScaleSets(): Promise<AzureScaleSet[]> {
    return this.#timed('listScaleSets', 'list scale sets', async () => {
      const out: AzureScaleSet[] = [];
      for await (const set of this.#compute.virtualMachineScaleSets.list(this.resourceGroup)) {
        if (set.name) out.push({ name: set.name, tags: tagsOf(set.tags), capacity: set.sku?.capacity ?? 0 });
      }
      return out;
    });
  }

  /** A network interface by resource id (it must be in our subscription and resource group). */
  async getNic(nicId: string): Promise<AzureNic> {
    const path = nicId.split('?')[0] as string;
    const scoped =
      `/subscriptions/${this.subscriptionId}/resourcegroups/${this.resourceGroup}/providers/`.toLowerCase();
    if (!path.toLowerCase().startsWith(scoped) || path.includes('..')) {
      throw new InvalidInputError(
        `network interface ${nicId} is outside resource group ${this.resourceGroup}`,
      );
    }
    const apiVersion = /\/virtualmachinescalesets\//i.test(path) ? scaleSetNicApiVersion : nicApiVersion;
    return this.#timed('getNic', `get network interface ${path}`, async () =>
      nicOf((await this.#get(path, apiVersion)) as RawNic),
    );
  }

  /** The network interfaces of every VM of a scale set, following nextLink. */
  async listScaleSetNics(scaleSet: string): Promise<AzureNic[]> {
    const path = `/subscriptions/${this.subscriptionId}/resourceGroups/${this.resourceGroup}/providers/Microsoft.Compute/virtualMachineScaleSets/${encodeURIComponent(scaleSet)}/networkInterfaces`;
    return this.#timed(
      'listScaleSetNics',
      `list the network interfaces of scale set ${scaleSet}`,
      async () => {
        const out: AzureNic[] = [];
        let next: string | undefined = path;
        while (next) {
          const page = (await this.#get(next, scaleSetNicApiVersion)) as {
            value?: RawNic[];
            nextLink?: string;
          };
          out.push(...(page.value ?? []).map(nicOf));
          next = page.nextLink;
          // Our bearer token goes only to the ARM endpoint we were configured with.
          if (next && new URL(next).origin !== this.#origin) {
            throw new UnavailableError(`ARM returned a nextLink outside ${this.#origin}`);
          }
        }
        return out;
      },
    );
  }

  async #get(pathOrUrl: string, apiVersion: string): Promise<unknown> {
    const absolute = pathOrUrl.startsWith('https://');
    const response = await this.#rest
      .pathUnchecked(pathOrUrl)
      .get(absolute ? {} : { queryParameters: { 'api-version': apiVersion } });
    const status = Number(response.status);
    if (status !== 200) {
      const body = response.body as { error?: { code?: string; message?: string } } | undefined;
      const failure = {
        status,
        code: body?.error?.code ?? '',
        message: body?.error?.message ?? `HTTP ${status}`,
        retryAfter: response.headers['retry-after'],
      };
      throw armError(`GET ${new URL(pathOrUrl, this.#origin).pathname}`, failure, undefined);
    }
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

  #vm(raw: RawVm): AzureVm {
    if (!raw.id || !raw.vmId) throw new UnavailableError(`ARM returned a VM without id or vmId`);
    const ref = parseAzureVmId(raw.id);
    if (
      !sameAzureName(ref.subscriptionId, this.subscriptionId) ||
      !sameAzureName(ref.resourceGroup, this.resourceGroup)
    ) {
      throw new UnavailableError(`ARM returned VM ${raw.id} outside resource group ${this.resourceGroup}`);
    }
    const nics = raw.networkProfile?.networkInterfaces ?? [];
    const ordered = [...nics.filter((n) => n.primary), ...nics.filter((n) => !n.primary)];
    return {
      ref,
      vmId: raw.vmId,
      computerName: raw.osProfile?.computerName,
      tags: tagsOf(raw.tags),
      state: stateOf(raw.instanceView?.statuses),
      nicIds: ordered.flatMap((n) => (n.id ? [n.id] : [])),
      latestModelApplied: raw.latestModelApplied,
    };
  }
}

/** The fields the SDK's deserialised VM and scale-set VM share (properties are flattened). */
interface RawVm {
  id?: string;
  vmId?: string;
  tags?: Record<string, string>;
  osProfile?: { computerName?: string };
  networkProfile?: { networkInterfaces?: { id?: string; primary?: boolean }[] };
  instanceView?: { statuses?: { code?: string }[] };
  latestModelApplied?: boolean;
}

interface RawNic {
  id?: string;
  properties?: {
    virtualMachine?: { id?: string };
    ipConfigurations?: { properties?: { privateIPAddress?: string; primary?: boolean } }[];
  };
}

function nicOf(raw: RawNic): AzureNic {
  const configs = raw.properties?.ipConfigurations ?? [];
  const ordered = [
    ...configs.filter((c) => c.properties?.primary),
    ...configs.filter((c) => !c.properties?.primary),
  ];
  return {
    id: raw.id ?? '',
    attachedTo: raw.properties?.virtualMachine?.id,
    privateIps: ordered.flatMap((c) =>
      c.properties?.privateIPAddress ? [c.properties.privateIPAddress] : [],
    ),
  };
}
