/**
 * The simulated Azure Resource Manager: the compute and network reads kops-controller makes (VMs,
 * scale sets, network interfaces, public addresses), as ARM's REST API answers them — JSON resources
 * with `properties`, `$expand=instanceView`, paging through `nextLink`, ARM's error body
 * `{ "error": { "code", "message" } }`, a bearer token the simulated IMDS issued, and the subscription
 * read bucket ARM documents (250 tokens, 25 per second refill) answering 429
 * `SubscriptionRequestsThrottled` with `Retry-After` and `x-ms-ratelimit-remaining-subscription-reads`.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { isIP } from 'node:net';
import type { ThrottleBucket } from '../aws/throttle.ts';
import type { AzureWorld, SimIpConfig, SimScaleSet, SimVm } from './world.ts';

/** One request the simulator served, named after the SDK operation (`virtualMachines.get`, …). */
export interface AzureCall {
  operation: string;
  path: string;
  query: Record<string, string>;
}

/** ARM's documented read bucket per subscription and region. */
export const armReadBucket = { capacity: 250, refillPerSecond: 25 } as const;

/** Thrown inside a handler to answer an ARM error. */
export class ArmError extends Error {
  readonly status: number;
  readonly code: string;
  readonly headers: Record<string, string>;

  constructor(status: number, code: string, message: string, headers: Record<string, string> = {}) {
    super(message);
    this.status = status;
    this.code = code;
    this.headers = headers;
  }
}

/** What the router needs besides the world. */
export interface ArmContext {
  world: AzureWorld;
  /** The public base URL, for `nextLink`. */
  baseUrl(): string;
  pageSize: number;
  /** The subscription read bucket; undefined: no throttling. */
  bucket: ThrottleBucket | undefined;
  /** Whether a bearer token was issued by the simulated IMDS. */
  validToken(token: string): boolean;
}

type Handler = (ctx: ArmContext, query: URLSearchParams, names: string[]) => unknown;

/** The instance view's statuses; without a power state (a VM being created) only its provisioning state. */
const instanceViewOf = (vm: SimVm) => ({
  statuses: vm.powerState
    ? [
        { code: 'ProvisioningState/succeeded', level: 'Info', displayStatus: 'Provisioning succeeded' },
        { code: `PowerState/${vm.powerState}`, level: 'Info', displayStatus: `VM ${vm.powerState}` },
      ]
    : [{ code: 'ProvisioningState/creating', level: 'Info', displayStatus: 'Creating' }],
});

/** One IP configuration of an interface as ARM names it, with the public address bound to it. */
interface SimIpConfigJson {
  name: string;
  id: string;
  primary: boolean;
  privateIp: string;
  publicIp: { id: string; name: string; address: string } | undefined;
}

/** One network interface of a VM as ARM names it. */
interface SimNicJson {
  name: string;
  id: string;
  primary: boolean;
  ipConfigs: SimIpConfigJson[];
}

/**
 * A VM's network interfaces, primary first, with ARM's ids: a scale-set VM's are children of the VM
 * (`…/virtualMachines/<i>/networkInterfaces/<nic>`), and so are their public addresses
 * (`…/ipConfigurations/<cfg>/publicIPAddresses/<pip>`, kubernetes-sigs/cloud-provider-azure
 * pkg/provider/azure_vmss.go `vmssPIPConfigurationRE`); a standalone VM's are resources of the
 * resource group (`Microsoft.Network/networkInterfaces/<nic>`, `Microsoft.Network/publicIPAddresses/<pip>`).
 */
function interfacesOf(ctx: ArmContext, vm: SimVm): SimNicJson[] {
  const group = `/subscriptions/${ctx.world.subscriptionId}/resourceGroups/${ctx.world.resourceGroup}/providers/Microsoft.Network`;
  const nicIdOf = (name: string) =>
    vm.scaleSet
      ? `${ctx.world.resourceId(vm)}/networkInterfaces/${name}`
      : `${group}/networkInterfaces/${name}`;
  const config = (nicId: string, nicName: string, n: number, ip: SimIpConfig): SimIpConfigJson => {
    const name = `ipconfig${n}`;
    const id = `${nicId}/ipConfigurations/${name}`;
    const pipName = vm.scaleSet ? 'pub1' : `${nicName}-${name}-pip`;
    return {
      name,
      id,
      primary: n === 1,
      privateIp: ip.privateIp,
      publicIp: ip.publicIp
        ? {
            id: vm.scaleSet ? `${id}/publicIPAddresses/${pipName}` : `${group}/publicIPAddresses/${pipName}`,
            name: pipName,
            address: ip.publicIp,
          }
        : undefined,
    };
  };
  const primaryName = vm.scaleSet ?? vm.name;
  const primaryId = nicIdOf(primaryName);
  const configs = [{ privateIp: vm.privateIp, publicIp: vm.publicIp }, ...(vm.moreIpConfigs ?? [])];
  return [
    {
      name: primaryName,
      id: primaryId,
      primary: true,
      ipConfigs: configs.map((ip, i) => config(primaryId, primaryName, i + 1, ip)),
    },
    ...(vm.moreNics ?? []).map((nic) => {
      // A standalone VM's interfaces share the resource group's names: prefixed with the VM's.
      const name = vm.scaleSet ? nic.name : `${vm.name}-${nic.name}`;
      const id = nicIdOf(name);
      return { name, id, primary: false, ipConfigs: [config(id, name, 1, nic)] };
    }),
  ];
}

function vmJson(ctx: ArmContext, vm: SimVm, expand: string | null) {
  const id = ctx.world.resourceId(vm);
  return {
    id,
    name: vm.name,
    type: vm.scaleSet
      ? 'Microsoft.Compute/virtualMachineScaleSets/virtualMachines'
      : 'Microsoft.Compute/virtualMachines',
    location: ctx.world.location,
    tags: vm.tags,
    ...(vm.scaleSet ? { instanceId: vm.instanceId } : {}),
    properties: {
      vmId: vm.vmId,
      timeCreated: vm.timeCreated,
      provisioningState: vm.deleting ? 'Deleting' : 'Succeeded',
      ...(vm.scaleSet ? { latestModelApplied: vm.latestModelApplied } : {}),
      osProfile: { computerName: vm.computerName, adminUsername: 'kops' },
      networkProfile: {
        networkInterfaces: interfacesOf(ctx, vm).map((nic) => ({
          id: nic.id,
          properties: { primary: nic.primary },
        })),
      },
      // A VM being deleted comes without its instance view, even when asked for.
      ...(expand?.toLowerCase() === 'instanceview' && !vm.deleting
        ? { instanceView: instanceViewOf(vm) }
        : {}),
    },
  };
}

/** A network interface as Microsoft.Network answers it (NetworkInterfaceGet.json's shape). */
function nicJson(ctx: ArmContext, vm: SimVm, nic: SimNicJson) {
  return {
    id: nic.id,
    name: nic.name,
    type: 'Microsoft.Network/networkInterfaces',
    properties: {
      provisioningState: 'Succeeded',
      primary: nic.primary,
      virtualMachine: { id: ctx.world.resourceId(vm) },
      ipConfigurations: nic.ipConfigs.map((config) => ({
        name: config.name,
        id: config.id,
        properties: {
          privateIPAddress: config.privateIp,
          privateIPAllocationMethod: 'Dynamic',
          privateIPAddressVersion: isIP(config.privateIp) === 6 ? 'IPv6' : 'IPv4',
          primary: config.primary,
          ...(config.publicIp ? { publicIPAddress: { id: config.publicIp.id } } : {}),
        },
      })),
    },
  };
}

/**
 * The public addresses of a VM's interfaces, as Microsoft.Network lists them (VmssPublicIpListAll.json
 * and PublicIpAddressList.json in Azure/azure-rest-api-specs): `properties.ipAddress` and
 * `properties.ipConfiguration.id`, the IP configuration it is bound to.
 */
function publicIpsJson(ctx: ArmContext, vm: SimVm) {
  return interfacesOf(ctx, vm).flatMap((nic) =>
    nic.ipConfigs.flatMap((config) =>
      config.publicIp
        ? [
            {
              id: config.publicIp.id,
              name: config.publicIp.name,
              type: 'Microsoft.Network/publicIPAddresses',
              location: ctx.world.location,
              properties: {
                provisioningState: 'Succeeded',
                ipAddress: config.publicIp.address,
                publicIPAddressVersion: isIP(config.publicIp.address) === 6 ? 'IPv6' : 'IPv4',
                publicIPAllocationMethod: 'Static',
                idleTimeoutInMinutes: 4,
                ipConfiguration: { id: config.id },
              },
            },
          ]
        : [],
    ),
  );
}

function scaleSetJson(ctx: ArmContext, set: SimScaleSet) {
  return {
    id: `/subscriptions/${ctx.world.subscriptionId}/resourceGroups/${ctx.world.resourceGroup}/providers/Microsoft.Compute/virtualMachineScaleSets/${set.name}`,
    name: set.name,
    type: 'Microsoft.Compute/virtualMachineScaleSets',
    location: ctx.world.location,
    tags: set.tags,
    sku: { name: set.sku, tier: 'Standard', capacity: set.capacity },
    properties: { provisioningState: 'Succeeded', upgradePolicy: { mode: 'Manual' } },
  };
}

function notFound(type: string, name: string, rg: string): ArmError {
  return new ArmError(
    404,
    'ResourceNotFound',
    `The Resource '${type}/${name}' under resource group '${rg}' was not found. For more details please go to https://aka.ms/ARMResourceNotFoundFix`,
  );
}

function scaleSetOf(ctx: ArmContext, name: string): SimScaleSet {
  const set = ctx.world.scaleSets.get(name.toLowerCase());
  if (!set) throw notFound('Microsoft.Compute/virtualMachineScaleSets', name, ctx.world.resourceGroup);
  return set;
}

function scaleSetVmOf(ctx: ArmContext, set: string, instanceId: string): SimVm {
  scaleSetOf(ctx, set);
  const vm = ctx.world.scaleSetVm(set, instanceId);
  // Compute answers a missing scale-set instance with its own code, not ARM's ResourceNotFound.
  if (!vm) throw new ArmError(404, 'NotFound', 'The entity was not found in this Azure location.');
  return vm;
}

/** A page of `items` after `$skiptoken`, with the `nextLink` of the rest. */
function page(ctx: ArmContext, path: string, query: URLSearchParams, items: unknown[]) {
  const start = Number(query.get('$skiptoken') ?? '0');
  const value = items.slice(start, start + ctx.pageSize);
  if (start + ctx.pageSize >= items.length) return { value };
  const next = new URLSearchParams(query);
  next.set('$skiptoken', String(start + ctx.pageSize));
  return { value, nextLink: `${ctx.baseUrl()}${path}?${next.toString()}` };
}

/** The routes under `/subscriptions/<s>/resourceGroups/<rg>/providers/`, by lower-cased shape. */
const routes: { operation: string; shape: string[]; handler: Handler; listPath?: true }[] = [
  {
    operation: 'virtualMachineScaleSets.list',
    shape: ['microsoft.compute', 'virtualmachinescalesets'],
    listPath: true,
    handler: (ctx) => [...ctx.world.scaleSets.values()].map((s) => scaleSetJson(ctx, s)),
  },
  {
    operation: 'virtualMachineScaleSetVMs.list',
    shape: ['microsoft.compute', 'virtualmachinescalesets', '*', 'virtualmachines'],
    listPath: true,
    handler: (ctx, query, [set]) =>
      ctx.world
        .scaleSetVms(scaleSetOf(ctx, set as string).name)
        .map((vm) => vmJson(ctx, vm, query.get('$expand'))),
  },
  {
    operation: 'virtualMachineScaleSetVMs.get',
    shape: ['microsoft.compute', 'virtualmachinescalesets', '*', 'virtualmachines', '*'],
    handler: (ctx, query, [set, id]) =>
      vmJson(ctx, scaleSetVmOf(ctx, set as string, id as string), query.get('$expand')),
  },
  {
    operation: 'networkInterfaces.listVirtualMachineScaleSetNetworkInterfaces',
    shape: ['microsoft.compute', 'virtualmachinescalesets', '*', 'networkinterfaces'],
    listPath: true,
    handler: (ctx, _query, [set]) =>
      ctx.world
        .scaleSetVms(scaleSetOf(ctx, set as string).name)
        .flatMap((vm) => interfacesOf(ctx, vm).map((nic) => nicJson(ctx, vm, nic))),
  },
  {
    operation: 'networkInterfaces.getVirtualMachineScaleSetNetworkInterface',
    shape: [
      'microsoft.compute',
      'virtualmachinescalesets',
      '*',
      'virtualmachines',
      '*',
      'networkinterfaces',
      '*',
    ],
    handler: (ctx, _query, [set, id, name]) => {
      const vm = scaleSetVmOf(ctx, set as string, id as string);
      const nic = interfacesOf(ctx, vm).find((n) => n.name.toLowerCase() === name?.toLowerCase());
      if (!nic)
        throw notFound('Microsoft.Network/networkInterfaces', name as string, ctx.world.resourceGroup);
      return nicJson(ctx, vm, nic);
    },
  },
  {
    // Microsoft.Network's listing under the Compute path (vmssPublicIpAddress.json in
    // Azure/azure-rest-api-specs, PublicIPAddresses_ListVirtualMachineScaleSetPublicIPAddresses).
    operation: 'publicIPAddresses.listVirtualMachineScaleSetPublicIPAddresses',
    shape: ['microsoft.compute', 'virtualmachinescalesets', '*', 'publicipaddresses'],
    listPath: true,
    handler: (ctx, _query, [set]) =>
      ctx.world.scaleSetVms(scaleSetOf(ctx, set as string).name).flatMap((vm) => publicIpsJson(ctx, vm)),
  },
  {
    operation: 'publicIPAddresses.list',
    shape: ['microsoft.network', 'publicipaddresses'],
    listPath: true,
    handler: (ctx) =>
      [...ctx.world.vms.values()].filter((vm) => !vm.scaleSet).flatMap((vm) => publicIpsJson(ctx, vm)),
  },
  {
    operation: 'virtualMachines.list',
    shape: ['microsoft.compute', 'virtualmachines'],
    listPath: true,
    handler: (ctx, query) =>
      [...ctx.world.vms.values()]
        .filter((vm) => !vm.scaleSet)
        .map((vm) => vmJson(ctx, vm, query.get('$expand'))),
  },
  {
    operation: 'virtualMachines.get',
    shape: ['microsoft.compute', 'virtualmachines', '*'],
    handler: (ctx, query, [name]) => {
      const vm = ctx.world.vms.get((name as string).toLowerCase());
      if (!vm || vm.scaleSet)
        throw notFound('Microsoft.Compute/virtualMachines', name as string, ctx.world.resourceGroup);
      return vmJson(ctx, vm, query.get('$expand'));
    },
  },
  {
    operation: 'networkInterfaces.get',
    shape: ['microsoft.network', 'networkinterfaces', '*'],
    handler: (ctx, _query, [name]) => {
      for (const vm of ctx.world.vms.values()) {
        if (vm.scaleSet) continue;
        const nic = interfacesOf(ctx, vm).find((n) => n.name.toLowerCase() === name?.toLowerCase());
        if (nic) return nicJson(ctx, vm, nic);
      }
      throw notFound('Microsoft.Network/networkInterfaces', name as string, ctx.world.resourceGroup);
    },
  },
];

/** The operation a path names and the handler's arguments, or undefined. */
export function matchArmRoute(
  ctx: ArmContext,
  path: string,
): { operation: string; run: (query: URLSearchParams) => unknown } | undefined {
  const parts = path.split('/').map(decodeURIComponent);
  // ['', 'subscriptions', s, 'resourceGroups', rg, 'providers', ...rest]
  if (
    parts.length < 8 ||
    parts[1]?.toLowerCase() !== 'subscriptions' ||
    parts[3]?.toLowerCase() !== 'resourcegroups' ||
    parts[5]?.toLowerCase() !== 'providers'
  ) {
    return undefined;
  }
  const rest = parts.slice(6);
  for (const route of routes) {
    if (route.shape.length !== rest.length) continue;
    const names: string[] = [];
    const matches = route.shape.every((segment, i) => {
      const actual = rest[i] as string;
      if (segment === '*') {
        names.push(actual);
        return true;
      }
      return actual.toLowerCase() === segment;
    });
    if (!matches) continue;
    return {
      operation: route.operation,
      run: (query) => {
        if (parts[2]?.toLowerCase() !== ctx.world.subscriptionId.toLowerCase()) {
          throw new ArmError(
            404,
            'SubscriptionNotFound',
            `The subscription '${parts[2]}' could not be found.`,
          );
        }
        if (parts[4]?.toLowerCase() !== ctx.world.resourceGroup.toLowerCase()) {
          throw new ArmError(
            404,
            'ResourceGroupNotFound',
            `Resource group '${parts[4]}' could not be found.`,
          );
        }
        const result = route.handler(ctx, query, names);
        return route.listPath ? page(ctx, path, query, result as unknown[]) : result;
      },
    };
  }
  return undefined;
}

/**
 * Rewrites an answer ARM would send (to play a broken API or proxy: a nextLink that repeats, another
 * VM than asked for, tags of the wrong type, a 200 carrying an error). Return a new `body` (and
 * optionally `status`), or `raw` text to send as it is (a body that is not JSON).
 */
export type ArmRewrite = (answer: { status: number; body: unknown; url: URL }) => {
  status?: number;
  body?: unknown;
  raw?: string;
};

/** Answers one ARM request (authentication, throttling, routing); faults are applied by the caller. */
export function serveArm(
  ctx: ArmContext,
  req: IncomingMessage,
  res: ServerResponse,
  url: URL,
  route: ReturnType<typeof matchArmRoute>,
  rewrite?: ArmRewrite,
): void {
  const send = (status: number, body: unknown, headers: Record<string, string> = {}) => {
    let text = JSON.stringify(body);
    if (rewrite) {
      const rewritten = rewrite({ status, body, url });
      status = rewritten.status ?? status;
      text = rewritten.raw ?? JSON.stringify(rewritten.body ?? body);
    }
    res.writeHead(status, {
      'content-type': 'application/json; charset=utf-8',
      'x-ms-request-id': crypto.randomUUID(),
      ...(ctx.bucket
        ? { 'x-ms-ratelimit-remaining-subscription-reads': String(Math.floor(ctx.bucket.tokens)) }
        : {}),
      ...headers,
    });
    res.end(text);
  };
  try {
    const auth = req.headers.authorization ?? '';
    if (!auth.startsWith('Bearer ') || !ctx.validToken(auth.slice(7))) {
      throw new ArmError(401, 'InvalidAuthenticationToken', 'The access token is invalid.', {
        'www-authenticate':
          'Bearer authorization_uri="https://login.microsoftonline.com/common", error="invalid_token"',
      });
    }
    if (req.method !== 'GET') throw new ArmError(405, 'MethodNotAllowed', `${req.method} is not simulated`);
    if (!route) throw new ArmError(404, 'InvalidResourceType', `No route for ${url.pathname}`);
    if (!url.searchParams.get('api-version')) {
      throw new ArmError(
        400,
        'MissingApiVersionParameter',
        'The api-version query parameter (?api-version=) is required for all requests.',
      );
    }
    // ARM binds a repeated parameter as one comma-joined value, which is no api-version.
    const versions = url.searchParams.getAll('api-version');
    if (versions.length > 1) {
      throw new ArmError(
        400,
        'InvalidApiVersionParameter',
        `The api-version '${versions.join(',')}' is invalid.`,
      );
    }
    if (ctx.bucket && !ctx.bucket.take()) {
      const wait = Math.max(1, Math.ceil(1 / ctx.bucket.refillPerSecond));
      throw new ArmError(
        429,
        'SubscriptionRequestsThrottled',
        `Number of 'read' requests for subscription '${ctx.world.subscriptionId}' exceeded. Please try again after '${wait}' seconds.`,
        { 'retry-after': String(wait) },
      );
    }
    send(200, route.run(url.searchParams));
  } catch (err) {
    if (!(err instanceof ArmError)) throw err;
    send(err.status, { error: { code: err.code, message: err.message } }, err.headers);
  }
}
