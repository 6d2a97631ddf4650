/**
 * A simulated Scaleway on loopback HTTP, speaking the real APIs for the calls the controller and a
 * node make, so the official SDK (`@scaleway/sdk-instance`, `-ipam`) runs against it unchanged:
 * - Instance `GET /instance/v1/zones/{zone}/servers` (`page`, `per_page` ≤ 100, `tags`, `servers`,
 *   `project` filters, `X-Total-Count`) and `GET …/servers/{id}`;
 * - IPAM `GET /ipam/v1/regions/{region}/ips` (`resource_id`, `is_ipv6`, `zonal`, `page`,
 *   `page_size`, `total_count`), addresses written as CIDR as the API does;
 * - the metadata service's `conf?format=json`, one URL per server (the real one, at 169.254.42.42,
 *   tells servers apart by source address, which loopback cannot).
 * Errors are Scaleway's JSON bodies (`unknown_resource`, `invalid_arguments`,
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
  /** Private addresses IPAM lists for the server. */
  privateIps?: string[];
  publicIps?: string[];
}

/** The record the simulator keeps for a server. */
interface SimServer {
  id: string;
  name: string;
  state: string;
  zone: string;
  project: string;
  tags: string[];
  privateIps: string[];
  publicIps: string[];
}

/** A running simulator; `throttleNext`'s wait is the 429's `reset_seconds`. */
export interface ScalewaySimulator extends FaultVerbs {
  apiUrl: string;
  zone: string;
  projectId: string;
  /** Credentials the API accepts, for the simulator's zone. */
  credentials: ScalewayCredentials;
  /** The same as `SCW_*` variables. */
  env: Record<string, string>;
  addServer(seed: SeedScalewayServer): SimServer;
  setState(id: string, state: string): void;
  deleteServer(id: string): void;
  /** Lets the API key read another project's servers and IPs too (an IAM policy over several projects). */
  grantProject(projectId: string): void;
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

function notFound(res: ServerResponse, resource: string): void {
  sendJson(res, 404, { type: 'unknown_resource', message: `"${resource}" not found` });
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
    public_ips: s.publicIps.map((address, i) => ({
      id: `${s.id.slice(0, 8)}-ip-${i}`,
      address,
      dynamic: false,
      family: address.includes(':') ? 'inet6' : 'inet',
      provisioning_mode: 'dhcp',
      state: 'attached',
      tags: [],
      gateway: '',
      netmask: '32',
    })),
    private_nics: [],
    volumes: {},
    creation_date: '2026-01-01T00:00:00Z',
  };
}

/** The IPAM records of a server's private addresses. */
function ipamRecords(s: SimServer, region: string, isIpv6: string | null): unknown[] {
  const records: unknown[] = [];
  s.privateIps.forEach((address, i) => {
    const v6 = address.includes(':');
    if (isIpv6 !== null && String(v6) !== isIpv6) return;
    records.push({
      id: `${s.id.slice(0, 8)}-ipam-${i}`,
      address: `${address}/${v6 ? 64 : 22}`,
      is_ipv6: v6,
      project_id: s.project,
      region,
      zone: s.zone,
      resource: { type: 'instance_server', id: s.id, name: s.name, mac_address: '02:00:00:00:00:01' },
      tags: [],
      reverses: [],
      source: { private_network_id: randomUUID() },
      created_at: '2026-01-01T00:00:00Z',
      updated_at: '2026-01-01T00:00:00Z',
    });
  });
  return records;
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
    private_ip: s.privateIps[0] ?? null,
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
  const ids = url.searchParams.get('servers')?.split(',').filter(Boolean);
  const project = url.searchParams.get('project');
  const matching = [...state.servers.values()].filter(
    (s) =>
      s.zone === inZone &&
      state.readable.has(s.project) &&
      (project === null || s.project === project) &&
      tags.every((t) => s.tags.includes(t)) &&
      (!ids || ids.includes(s.id)),
  );
  const slice = matching.slice((page - 1) * perPage, page * perPage);
  sendJson(res, 200, { servers: slice.map(serverView) }, { 'x-total-count': String(matching.length) });
}

function listIps(state: ScalewayState, url: URL, res: ServerResponse, region: string) {
  const page = intParam(url, 'page', 1);
  const pageSize = intParam(url, 'page_size', 50);
  if (!Number.isInteger(pageSize) || pageSize < 1 || pageSize > 1000) {
    return invalid(res, 'page_size', 'must be between 1 and 1000');
  }
  const resourceId = url.searchParams.get('resource_id');
  const zonal = url.searchParams.get('zonal');
  const ips: unknown[] = [];
  for (const s of state.servers.values()) {
    if (!state.readable.has(s.project) || !s.zone.startsWith(`${region}-`)) continue;
    if (resourceId !== null && s.id !== resourceId) continue;
    if (zonal !== null && s.zone !== zonal) continue;
    ips.push(...ipamRecords(s, region, url.searchParams.get('is_ipv6')));
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
  const s = state.servers.get(decodeURIComponent(route.servers?.[2] as string));
  if (!s || s.zone !== inZone || !state.readable.has(s.project)) return notFound(res, 'instance_server');
  sendJson(res, 200, { server: serverView(s) });
}

/** Starts the simulator on 127.0.0.1 and an ephemeral port. */
export async function startScalewaySimulator(
  options: ScalewaySimulatorOptions = {},
): Promise<ScalewaySimulator> {
  const zone = options.zone ?? 'fr-par-1';
  const projectId = randomUUID();
  const state: ScalewayState = {
    servers: new Map(),
    projectId,
    readable: new Set([projectId]),
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
    credentials: { accessKey, secretKey, projectId, zone, apiUrl: base },
    env: {
      SCW_ACCESS_KEY: accessKey,
      SCW_SECRET_KEY: secretKey,
      SCW_DEFAULT_PROJECT_ID: projectId,
      SCW_DEFAULT_ZONE: zone,
      SCW_API_URL: base,
    },
    addServer: (seed) => {
      const record: SimServer = {
        id: seed.id ?? randomUUID(),
        name: seed.name,
        state: seed.state ?? 'running',
        zone: seed.zone ?? zone,
        project: seed.project ?? projectId,
        tags: [...(seed.tags ?? [])],
        privateIps: [...(seed.privateIps ?? [])],
        publicIps: [...(seed.publicIps ?? [])],
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
    metadataUrl: (id) => `${base}/metadata/${encodeURIComponent(id)}/conf?format=json`,
    ...faultVerbs(state.faults),
    calls: state.log.calls,
    count: (operation) => state.log.count(operation),
    clearCalls: () => state.log.clear(),
    close: () => listener.close(),
  };
}
