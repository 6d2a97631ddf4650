/**
 * A simulated Scaleway on loopback HTTP, speaking the real APIs for the calls the controller and a
 * node make, so the official SDK (`@scaleway/sdk-instance`, `-ipam`) runs against it unchanged:
 * - Instance `GET /instance/v1/zones/{zone}/servers` (`page`, `per_page` ≤ 100, `tags`, `servers`,
 *   `project` filters, `X-Total-Count`) and `GET …/servers/{id}`;
 * - IPAM `GET /ipam/v1/regions/{region}/ips` (`page`, `page_size`, `total_count`; the filters
 *   `resource_id(s)`, `resource_type(s)`, `is_ipv6`, `project_id`, `attached` and one source of
 *   `zonal` | `private_network_id`), addresses written as CIDR as the API does. IPAM holds what the
 *   real one holds for an Instance: a routed public IP is a zonal record (`source.zonal`, `zone`)
 *   attached to the server (`resource` `instance_server`); a Private-Network address is a regional
 *   record (`source.subnet_id`, the network's subnet; `zone: null`) attached to the server's Private NIC (`resource`
 *   `instance_private_nic`, the NIC's id: the server's id finds it not). So `zonal=<zone>` lists
 *   public addresses only (CLI docs: `source.zonal` is "a public zoned IP"). A filter the API has
 *   that is not simulated answers 501, never silently ignored, and so does a parameter the real API
 *   does not have (it would ignore it: a caller relying on it would be answered more than it asked);
 * - the metadata service's `conf?format=json`, one URL per server (the real one, at 169.254.42.42,
 *   tells servers apart by source address, which loopback cannot).
 * Errors are Scaleway's JSON bodies (`not_found`, `invalid_arguments`,
 * `denied_authentication`, `too_many_requests` with its quota and `reset_seconds`), authentication
 * is the `X-Auth-Token` secret key, and faults can be injected: errors, throttling, latency, drops.
 * The key reads its own project and any project granted to it (`grantProject`), as a real key whose
 * IAM policy covers several projects does: GetServer answers for a server of any of them, and
 * ListServers without a `project` filter lists them all.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { ScalewayCredentials } from '../../cloud/scaleway/client.ts';
import { listenOnLoopback } from '../../net/loopback.ts';
import {
  applyTransportFault,
  CallLog,
  FaultQueue,
  type FaultVerbs,
  faultVerbs,
  sendJson,
} from '../cloud-sim.ts';

/** One request the simulator served: `servers.list`, `servers.get`, `ips.list`, `metadata`. */
export interface ScalewayCall {
  operation: string;
  path: string;
}

/** A server to seed. */
export interface SeedScalewayServer {
  id?: string;
  name: string;
  /** running, starting, stopped, stopped in place, stopping, locked (default running). */
  state?: string;
  zone?: string;
  /** Default the simulator's project. */
  project?: string;
  tags?: string[];
  /**
   * Addresses of the server's Private NIC on the simulator's Private Network: regional IPAM records
   * attached to the NIC (none: no NIC).
   */
  privateIps?: string[];
  /** More Private NICs, each on its Private Network (a new one unless named). */
  privateNics?: Array<{ privateNetworkId?: string; ips: string[] }>;
  /** Routed public IPs: on the Instance record and, as the real IPAM does, zonal records attached to the server. */
  publicIps?: string[];
  /** Its `creation_date` as the API writes it (default now, see {@link scalewayTime}). */
  creationDate?: string;
}

/** A server's Private NIC. */
interface SimNic {
  id: string;
  privateNetworkId: string;
  macAddress: string;
}

/**
 * An IPAM record: public (zonal, attached to the server) or private (regional, attached to a NIC).
 * A private one is answered with its network's subnet as source (`subnet_id`, one subnet for IPv4
 * and one for IPv6, as the real IPAM does); the network is kept to filter by `private_network_id`.
 */
interface SimIpamIp {
  id: string;
  /** Without its prefix length. */
  address: string;
  isIpv6: boolean;
  source: { zonal: string } | { private_network_id: string; subnet_id: string };
  resource: { type: 'instance_server' | 'instance_private_nic'; id: string; macAddress?: string };
}

/** The record the simulator keeps for a server. */
interface SimServer {
  id: string;
  name: string;
  state: string;
  zone: string;
  project: string;
  tags: string[];
  /** Every address of its Private NICs. */
  privateIps: string[];
  publicIps: string[];
  privateNics: SimNic[];
  /** Its IPAM records, in the order they were created (public first: they come with the server). */
  ipam: SimIpamIp[];
  /** Its `creation_date`, as the API writes it; a test may put anything here. */
  creationDate: unknown;
}

/**
 * A time as the Instance API writes `creation_date`: microseconds and `+00:00`
 * (`2025-06-10T15:30:12.563745+00:00`, scaleway/terraform-provider-scaleway
 * internal/services/ipam/testdata/data-source-ipamip-instance.cassette.yaml).
 */
export function scalewayTime(date: Date): string {
  return date.toISOString().replace(/Z$/, '000+00:00');
}

/** A running simulator; `throttleNext`'s wait is the 429's `reset_seconds`. */
export interface ScalewaySimulator extends FaultVerbs {
  apiUrl: string;
  zone: string;
  projectId: string;
  /** The Private Network of the `privateIps` of the servers in the simulator's region. */
  privateNetworkId: string;
  /** Credentials the API accepts, for the simulator's zone. */
  credentials: ScalewayCredentials;
  /** The same as `SCW_*` variables. */
  env: Record<string, string>;
  addServer(seed: SeedScalewayServer): SimServer;
  setState(id: string, state: string): void;
  deleteServer(id: string): void;
  /** Lets the API key read another project's servers and IPs too (an IAM policy over several projects). */
  grantProject(projectId: string): void;
  /**
   * IPAM ignores these query parameters from now on (`[]`: none), as a real API ignores one it does
   * not know: what the caller does with records it did not ask for.
   */
  ignoreIpamFilters(names: string[]): void;
  /** The URL the server `id` sees at `http://169.254.42.42/conf?format=json`. */
  metadataUrl(id: string): string;
  readonly calls: readonly ScalewayCall[];
  count(operation: string): number;
  clearCalls(): void;
  close(): Promise<void>;
}

/** Options of {@link startScalewaySimulator}. */
export interface ScalewaySimulatorOptions {
  zone?: string;
}

/** The Instance API's standard 404 (`type` `not_found`, the resource and its id). */
function notFound(res: ServerResponse, resource: string, resourceId = ''): void {
  sendJson(res, 404, {
    type: 'not_found',
    message: 'resource is not found',
    resource,
    resource_id: resourceId,
  });
}

function invalid(res: ServerResponse, field: string, message: string): void {
  sendJson(res, 400, {
    type: 'invalid_arguments',
    message: 'Validation Error',
    fields: { [field]: [message] },
  });
}

/** The Instance API's form of a server. */
function serverView(s: SimServer) {
  return {
    id: s.id,
    name: s.name,
    hostname: s.name,
    state: s.state,
    zone: s.zone,
    project: s.project,
    organization: s.project,
    commercial_type: 'DEV1-M',
    tags: s.tags,
    private_ip: null,
    routed_ip_enabled: true,
    public_ips: s.publicIps.map((address, i) => ({
      id: `${s.id.slice(0, 8)}-ip-${i}`,
      address,
      dynamic: false,
      family: address.includes(':') ? 'inet6' : 'inet',
      provisioning_mode: address.includes(':') ? 'slaac' : 'dhcp',
      state: 'attached',
      tags: [],
      gateway: '',
      netmask: address.includes(':') ? '64' : '32',
      ipam_id: s.ipam.find((r) => 'zonal' in r.source && r.address === address)?.id ?? null,
    })),
    private_nics: s.privateNics.map((nic) => ({
      id: nic.id,
      server_id: s.id,
      private_network_id: nic.privateNetworkId,
      mac_address: nic.macAddress,
      state: 'available',
      tags: [],
      creation_date: '2026-01-01T00:00:00Z',
      zone: s.zone,
    })),
    volumes: {},
    creation_date: s.creationDate,
  };
}

/** The region of a zone (`fr-par-1` → `fr-par`). */
const regionOf = (zone: string) => zone.replace(/-[1-9]$/, '');

/**
 * The API's form of an IPAM record. A private (regional) one has `zone: null`, its network's subnet
 * as `source` and its NIC's MAC address in capitals, as the real IPAM answers
 * (scaleway/terraform-provider-scaleway internal/services/ipam/testdata/
 * data-source-ipamip-instance.cassette.yaml).
 */
function ipamView(s: SimServer, ip: SimIpamIp) {
  const zonal = 'zonal' in ip.source;
  const length = ip.isIpv6 ? 64 : zonal ? 32 : 22;
  return {
    id: ip.id,
    address: `${ip.address}/${length}`,
    is_ipv6: ip.isIpv6,
    project_id: s.project,
    region: regionOf(s.zone),
    zone: zonal ? s.zone : null,
    // A routed IP's resource is the server, with no name or MAC (as the real IPAM lists it).
    resource: {
      type: ip.resource.type,
      id: ip.resource.id,
      name: zonal ? null : s.name,
      mac_address: ip.resource.macAddress?.toUpperCase() ?? null,
    },
    tags: [],
    reverses: [],
    source: 'zonal' in ip.source ? ip.source : { subnet_id: ip.source.subnet_id },
    created_at: '2026-01-01T00:00:00Z',
    updated_at: '2026-01-01T00:00:00Z',
  };
}

/** The IPv4 and IPv6 subnets of a Private Network, by the network's id. */
type SubnetsOf = (privateNetworkId: string) => { v4: string; v6: string };

/** A server's records: its routed public IPs (zonal, on the server), then its NICs' addresses. */
function seedIpam(
  zone: string,
  serverId: string,
  publicIps: string[],
  nics: Array<SimNic & { ips: string[] }>,
  subnetsOf: SubnetsOf,
) {
  const records: SimIpamIp[] = publicIps.map((address) => ({
    id: randomUUID(),
    address,
    isIpv6: address.includes(':'),
    source: { zonal: zone },
    resource: { type: 'instance_server', id: serverId },
  }));
  for (const nic of nics) {
    const subnets = subnetsOf(nic.privateNetworkId);
    for (const address of nic.ips) {
      const isIpv6 = address.includes(':');
      records.push({
        id: randomUUID(),
        address,
        isIpv6,
        source: { private_network_id: nic.privateNetworkId, subnet_id: isIpv6 ? subnets.v6 : subnets.v4 },
        resource: { type: 'instance_private_nic', id: nic.id, macAddress: nic.macAddress },
      });
    }
  }
  return records;
}

/** A locally administered MAC address, as Scaleway gives a Private NIC. */
function randomMac(): string {
  const hex = randomUUID().replace(/-/g, '');
  return ['02', '00', hex.slice(0, 2), hex.slice(2, 4), hex.slice(4, 6), hex.slice(6, 8)].join(':');
}

/** The metadata service's `conf?format=json` as server `s` reads it. */
function metadataDocument(s: SimServer) {
  return {
    id: s.id,
    name: s.name,
    hostname: s.name,
    organization: s.project,
    project: s.project,
    commercial_type: 'DEV1-M',
    tags: s.tags,
    state_detail: 'booted',
    // The legacy NAT address, which a server with routed IPs does not have.
    private_ip: null,
    location: { zone_id: s.zone, platform_id: '14', cluster_id: '1', hypervisor_id: '1', node_id: '1' },
  };
}

/** Scaleway's 429: its quota and the `reset_seconds` to wait. */
function throttled(res: ServerResponse, resetSeconds: number): void {
  sendJson(
    res,
    429,
    {
      type: 'too_many_requests',
      message: 'too many requests',
      help_message: 'simulated rate limit',
      limit: { quota: 100, window_seconds: 1 },
      reset_seconds: resetSeconds,
    },
    { 'retry-after': String(resetSeconds), 'x-ratelimit-limit': '100', 'x-ratelimit-remaining': '0' },
  );
}

function intParam(url: URL, name: string, fallback: number): number {
  const raw = url.searchParams.get(name);
  return raw === null ? fallback : Number(raw);
}

/** What the simulator holds. */
interface ScalewayState {
  servers: Map<string, SimServer>;
  projectId: string;
  /** The projects the API key may read: its own and those granted. */
  readable: Set<string>;
  /** IPAM query parameters answered as unknown (ignored). */
  ignoredIpamFilters: Set<string>;
  secretKey: string;
  log: CallLog<ScalewayCall>;
  faults: FaultQueue;
}

function listServers(state: ScalewayState, url: URL, res: ServerResponse, inZone: string) {
  const page = intParam(url, 'page', 1);
  const perPage = intParam(url, 'per_page', 50);
  if (!Number.isInteger(page) || page < 1) return invalid(res, 'page', 'must be a positive integer');
  if (!Number.isInteger(perPage) || perPage < 1 || perPage > 100) {
    return invalid(res, 'per_page', 'must be between 1 and 100');
  }
  const tags = url.searchParams.get('tags')?.split(',').filter(Boolean) ?? [];
  const listed = url.searchParams.get('servers');
  const ids = listed === null ? undefined : new Set(listed.split(',').filter(Boolean));
  const project = url.searchParams.get('project');
  const matching = [...state.servers.values()].filter(
    (s) =>
      s.zone === inZone &&
      state.readable.has(s.project) &&
      (project === null || s.project === project) &&
      tags.every((t) => s.tags.includes(t)) &&
      (!ids || ids.has(s.id)),
  );
  const slice = matching.slice((page - 1) * perPage, page * perPage);
  sendJson(res, 200, { servers: slice.map(serverView) }, { 'x-total-count': String(matching.length) });
}

const uuidPattern = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** IPAM's resource types (`@scaleway/sdk-ipam` `ResourceType`); another answers 400. */
const ipamResourceTypes = new Set([
  'unknown_type',
  'custom',
  'instance_server',
  'instance_ip',
  'instance_private_nic',
  'lb_server',
  'fip_ip',
  'vpc_gateway',
  'vpc_gateway_network',
  'k8s_node',
  'k8s_cluster',
  'rdb_instance',
  'redis_cluster',
  'baremetal_server',
  'baremetal_private_nic',
  'llm_deployment',
  'mgdb_instance',
  'apple_silicon_server',
  'apple_silicon_private_nic',
  'serverless_container',
  'serverless_function',
  'vpn_gateway',
  'ddl_datalab',
  'kafka_cluster',
  'bgp_endpoint',
  'scbl_sedb_cluster',
]);

/** The IPAM source one-of: at most one may be given. */
const ipamSources = ['zonal', 'private_network_id', 'subnet_id', 'source_vpc_id'];

/** ListIPs parameters the real API has that the simulator does not model: 501, never ignored. */
const unsimulatedIpamFilters = [
  'subnet_id',
  'source_vpc_id',
  'vpc_id',
  'resource_name',
  'mac_address',
  'tags',
  'organization_id',
  'ip_ids',
];

/**
 * Every ListIPs query parameter the real API has (`@scaleway/sdk-ipam` 1.5.0 `pageOfListIPs`, the
 * `urlParams` it sends). The real API ignores any other; the simulator refuses it (501), so a caller
 * that relies on a filter IPAM does not have is caught here rather than answered more than it asked.
 */
const realIpamParameters = new Set([
  'attached',
  'ip_ids',
  'is_ipv6',
  'mac_address',
  'order_by',
  'organization_id',
  'page',
  'page_size',
  'project_id',
  'resource_id',
  'resource_ids',
  'resource_name',
  'resource_type',
  'resource_types',
  'tags',
  'vpc_id',
  ...ipamSources,
]);

/** Why the ListIPs query is refused (400 field and message, or 501), or undefined. */
function ipamQueryError(
  get: (n: string) => string | null,
  getAll: (n: string) => string[],
  names: Iterable<string>,
) {
  const unknown = [...names].find((n) => !realIpamParameters.has(n));
  if (unknown)
    return { status: 501, field: unknown, message: 'not a parameter of the real API, which would ignore it' };
  const sources = ipamSources.filter((n) => get(n) !== null);
  if (sources.length > 1) return { field: sources.join(', '), message: 'at most one source may be set' };
  const unsimulated = unsimulatedIpamFilters.find((n) => get(n) !== null);
  if (unsimulated) return { status: 501, field: unsimulated, message: 'not simulated' };
  for (const name of ['resource_id', 'resource_ids', 'project_id', 'private_network_id']) {
    if (getAll(name).some((v) => !uuidPattern.test(v))) return { field: name, message: 'must be a UUID' };
  }
  const types = [...getAll('resource_type'), ...getAll('resource_types')];
  if (types.some((t) => !ipamResourceTypes.has(t)))
    return { field: 'resource_type', message: 'unknown type' };
  for (const name of ['is_ipv6', 'attached']) {
    const v = get(name);
    if (v !== null && v !== 'true' && v !== 'false') return { field: name, message: 'must be a boolean' };
  }
  const order = get('order_by');
  if (order !== null && order !== 'created_at_asc')
    return { status: 501, field: 'order_by', message: 'not simulated' };
  return undefined;
}

/** The ListIPs filters of one query, read once: whether record `ip` of server `s` passes them. */
function ipamFilter(
  get: (n: string) => string | null,
  getAll: (n: string) => string[],
): (s: SimServer, ip: SimIpamIp) => boolean {
  const resourceId = get('resource_id');
  const ids = new Set(getAll('resource_ids'));
  const type = get('resource_type');
  const types = new Set(getAll('resource_types'));
  const isIpv6 = get('is_ipv6');
  const project = get('project_id');
  const zonal = get('zonal');
  const network = get('private_network_id');
  const attached = get('attached');
  return (s, ip) =>
    (resourceId === null || ip.resource.id === resourceId) &&
    (ids.size === 0 || ids.has(ip.resource.id)) &&
    (type === null || ip.resource.type === type) &&
    (types.size === 0 || types.has(ip.resource.type)) &&
    (isIpv6 === null || String(ip.isIpv6) === isIpv6) &&
    (project === null || s.project === project) &&
    (zonal === null || ('zonal' in ip.source && ip.source.zonal === zonal)) &&
    (network === null || ('private_network_id' in ip.source && ip.source.private_network_id === network)) &&
    // Every simulated record is attached.
    (attached === null || attached === 'true');
}

function listIps(state: ScalewayState, url: URL, res: ServerResponse, region: string) {
  const page = intParam(url, 'page', 1);
  const pageSize = intParam(url, 'page_size', 50);
  if (!Number.isInteger(page) || page < 1) return invalid(res, 'page', 'must be a positive integer');
  if (!Number.isInteger(pageSize) || pageSize < 1 || pageSize > 1000) {
    return invalid(res, 'page_size', 'must be between 1 and 1000');
  }
  // A parameter the API does not know is ignored, not refused.
  const known = (name: string) => !state.ignoredIpamFilters.has(name);
  const get = (name: string) => (known(name) ? url.searchParams.get(name) : null);
  const getAll = (name: string) => (known(name) ? url.searchParams.getAll(name) : []);
  const refused = ipamQueryError(get, getAll, url.searchParams.keys());
  if (refused?.status === 501) {
    return sendJson(res, 501, {
      type: 'not_implemented',
      message: `the simulator does not model the IPAM filter ${refused.field}: ${refused.message}`,
    });
  }
  if (refused) return invalid(res, refused.field, refused.message);
  const matches = ipamFilter(get, getAll);
  const ips: unknown[] = [];
  for (const s of state.servers.values()) {
    if (!state.readable.has(s.project) || regionOf(s.zone) !== region) continue;
    for (const ip of s.ipam) if (matches(s, ip)) ips.push(ipamView(s, ip));
  }
  sendJson(res, 200, { total_count: ips.length, ips: ips.slice((page - 1) * pageSize, page * pageSize) });
}

/** A request's operation and the path's parts. */
function routeOf(method: string | undefined, path: string) {
  const servers = /^\/instance\/v1\/zones\/([^/]+)\/servers(?:\/([^/]+))?$/.exec(path);
  const ips = /^\/ipam\/v1\/regions\/([^/]+)\/ips$/.exec(path);
  const metadata = /^\/metadata\/([^/]+)\/conf$/.exec(path);
  let operation = 'unknown';
  if (method === 'GET' && servers) operation = servers[2] ? 'servers.get' : 'servers.list';
  else if (method === 'GET' && ips) operation = 'ips.list';
  else if (method === 'GET' && metadata) operation = 'metadata';
  return { operation, servers, ips, metadata };
}

/** Answers the request's injected fault; true when one answered (or dropped) it. */
async function answerFault(
  state: ScalewayState,
  operation: string,
  req: IncomingMessage,
  res: ServerResponse,
) {
  const fault = state.faults.take(operation);
  if (await applyTransportFault(fault, req)) return true;
  if (fault?.status === 429) throttled(res, fault.retryAfterSeconds ?? 1);
  else if (fault?.status)
    sendJson(res, fault.status, { message: `simulated fault ${fault.status}`, type: 'internal_error' });
  return fault?.status !== undefined;
}

/** One request: logged, its fault, then the metadata service or the authenticated APIs. */
async function serveScaleway(state: ScalewayState, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://127.0.0.1');
  const route = routeOf(req.method, url.pathname);
  state.log.add({ operation: route.operation, path: `${url.pathname}${url.search}` });
  if (await answerFault(state, route.operation, req, res)) return;
  if (route.operation === 'metadata') {
    const s = state.servers.get(decodeURIComponent(route.metadata?.[1] ?? ''));
    if (!s || url.searchParams.get('format') !== 'json') {
      res.writeHead(404).end('not found');
      return;
    }
    return sendJson(res, 200, metadataDocument(s));
  }
  if (route.operation === 'unknown') return notFound(res, 'route');
  if (req.headers['x-auth-token'] !== state.secretKey) {
    return sendJson(res, 401, {
      type: 'denied_authentication',
      method: 'api_key',
      reason: 'invalid_argument',
      message: 'authentication is denied',
    });
  }
  if (route.operation === 'ips.list') return listIps(state, url, res, route.ips?.[1] as string);
  const inZone = route.servers?.[1] as string;
  if (route.operation === 'servers.list') return listServers(state, url, res, inZone);
  const serverId = decodeURIComponent(route.servers?.[2] as string);
  const s = state.servers.get(serverId);
  if (!s || s.zone !== inZone || !state.readable.has(s.project)) {
    return notFound(res, 'instance_server', serverId);
  }
  sendJson(res, 200, { server: serverView(s) });
}

/** Starts the simulator on 127.0.0.1 and an ephemeral port. */
export async function startScalewaySimulator(
  options: ScalewaySimulatorOptions = {},
): Promise<ScalewaySimulator> {
  const zone = options.zone ?? 'fr-par-1';
  const projectId = randomUUID();
  // A Private Network is regional: one for `privateIps` per region.
  const networks = new Map<string, string>();
  const networkOf = (region: string) => {
    const known = networks.get(region) ?? randomUUID();
    networks.set(region, known);
    return known;
  };
  const privateNetworkId = networkOf(regionOf(zone));
  const subnets = new Map<string, { v4: string; v6: string }>();
  const subnetsOf: SubnetsOf = (network) => {
    const known = subnets.get(network) ?? { v4: randomUUID(), v6: randomUUID() };
    subnets.set(network, known);
    return known;
  };
  const state: ScalewayState = {
    servers: new Map(),
    projectId,
    readable: new Set([projectId]),
    ignoredIpamFilters: new Set(),
    secretKey: randomUUID(),
    log: new CallLog(),
    faults: new FaultQueue(),
  };
  const { servers, secretKey } = state;
  const accessKey = `SCW${randomUUID().replace(/-/g, '').slice(0, 17).toUpperCase()}`;
  const server = createServer((req, res) => {
    serveScaleway(state, req, res).catch((err: unknown) => {
      if (!res.headersSent) sendJson(res, 500, { message: (err as Error).message });
    });
  });
  const listener = await listenOnLoopback(server);
  const base = listener.url;
  const existing = (id: string) => {
    const found = servers.get(id);
    if (!found) throw new Error(`no simulated server ${id}`);
    return found;
  };
  return {
    apiUrl: base,
    zone,
    projectId,
    privateNetworkId,
    credentials: { accessKey, secretKey, projectId, zone, apiUrl: base },
    env: {
      SCW_ACCESS_KEY: accessKey,
      SCW_SECRET_KEY: secretKey,
      SCW_DEFAULT_PROJECT_ID: projectId,
      SCW_DEFAULT_ZONE: zone,
      SCW_API_URL: base,
    },
    addServer: (seed) => {
      const id = seed.id ?? randomUUID();
      const serverZone = seed.zone ?? zone;
      const nics = [
        ...(seed.privateIps?.length
          ? [{ privateNetworkId: networkOf(regionOf(serverZone)), ips: seed.privateIps }]
          : []),
        ...(seed.privateNics ?? []),
      ].map((n) => ({
        id: randomUUID(),
        privateNetworkId: n.privateNetworkId ?? randomUUID(),
        macAddress: randomMac(),
        ips: [...n.ips],
      }));
      const publicIps = [...(seed.publicIps ?? [])];
      const record: SimServer = {
        id,
        name: seed.name,
        state: seed.state ?? 'running',
        zone: serverZone,
        project: seed.project ?? projectId,
        tags: [...(seed.tags ?? [])],
        privateIps: nics.flatMap((n) => n.ips),
        publicIps,
        privateNics: nics.map(({ id: nicId, privateNetworkId: pn, macAddress }) => ({
          id: nicId,
          privateNetworkId: pn,
          macAddress,
        })),
        ipam: seedIpam(serverZone, id, publicIps, nics, subnetsOf),
        creationDate: seed.creationDate ?? scalewayTime(new Date()),
      };
      servers.set(record.id, record);
      return record;
    },
    setState: (id, s) => {
      existing(id).state = s;
    },
    deleteServer: (id) => {
      existing(id);
      servers.delete(id);
    },
    grantProject: (id) => {
      state.readable.add(id);
    },
    ignoreIpamFilters: (names) => {
      state.ignoredIpamFilters = new Set(names);
    },
    metadataUrl: (id) => `${base}/metadata/${encodeURIComponent(id)}/conf?format=json`,
    ...faultVerbs(state.faults),
    calls: state.log.calls,
    count: (operation) => state.log.count(operation),
    clearCalls: () => state.log.clear(),
    close: () => listener.close(),
  };
}
