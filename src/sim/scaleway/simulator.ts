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
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { ScalewayCredentials } from '../../cloud/scaleway/client.ts';
import { listenOnLoopback } from '../../net/loopback.ts';

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

/** A fault for the next `times` requests of `operation` (any, when absent). */
interface Fault {
  times: number;
  operation?: string;
  status?: number;
  resetSeconds?: number;
  delayMs?: number;
  drop?: boolean;
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

/** A running simulator. */
export interface ScalewaySimulator {
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
  /** The URL the server `id` sees at `http://169.254.42.42/conf?format=json`. */
  metadataUrl(id: string): string;
  failNext(times: number, status: number, operation?: string): void;
  throttleNext(times: number, resetSeconds: number, operation?: string): void;
  delayNext(times: number, delayMs: number, operation?: string): void;
  dropNext(times: number, operation?: string): void;
  resetFaults(): void;
  readonly calls: readonly ScalewayCall[];
  count(operation: string): number;
  clearCalls(): void;
  close(): Promise<void>;
}

/** Options of {@link startScalewaySimulator}. */
export interface ScalewaySimulatorOptions {
  zone?: string;
}

function send(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  const text = JSON.stringify(body);
  // Exactly `application/json`: the SDK parses a body as JSON only under that content type.
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
    ...headers,
  });
  res.end(text);
}

function notFound(res: ServerResponse, resource: string): void {
  send(res, 404, { type: 'unknown_resource', message: `"${resource}" not found` });
}

function invalid(res: ServerResponse, field: string, message: string): void {
  send(res, 400, { type: 'invalid_arguments', message: 'Validation Error', fields: { [field]: [message] } });
}

/** Starts the simulator on 127.0.0.1 and an ephemeral port. */
export async function startScalewaySimulator(
  options: ScalewaySimulatorOptions = {},
): Promise<ScalewaySimulator> {
  const zone = options.zone ?? 'fr-par-1';
  const projectId = randomUUID();
  const accessKey = `SCW${randomUUID().replace(/-/g, '').slice(0, 17).toUpperCase()}`;
  const secretKey = randomUUID();
  const servers = new Map<string, SimServer>();
  const calls: ScalewayCall[] = [];
  let faults: Fault[] = [];
  let base = '';

  const planFault = (operation: string): Fault | undefined => {
    const fault = faults.find((f) => f.operation === undefined || f.operation === operation);
    if (!fault) return undefined;
    fault.times--;
    faults = faults.filter((f) => f.times > 0);
    return fault;
  };

  const view = (s: SimServer) => ({
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
  });

  const intParam = (url: URL, name: string, fallback: number) => {
    const raw = url.searchParams.get(name);
    return raw === null ? fallback : Number(raw);
  };

  const listServers = (url: URL, res: ServerResponse, inZone: string) => {
    const page = intParam(url, 'page', 1);
    const perPage = intParam(url, 'per_page', 50);
    if (!Number.isInteger(page) || page < 1) return invalid(res, 'page', 'must be a positive integer');
    if (!Number.isInteger(perPage) || perPage < 1 || perPage > 100) {
      return invalid(res, 'per_page', 'must be between 1 and 100');
    }
    const tags = url.searchParams.get('tags')?.split(',').filter(Boolean) ?? [];
    const ids = url.searchParams.get('servers')?.split(',').filter(Boolean);
    const project = url.searchParams.get('project') ?? projectId;
    const matching = [...servers.values()].filter(
      (s) =>
        s.zone === inZone &&
        s.project === project &&
        project === projectId &&
        tags.every((t) => s.tags.includes(t)) &&
        (!ids || ids.includes(s.id)),
    );
    const slice = matching.slice((page - 1) * perPage, page * perPage);
    send(res, 200, { servers: slice.map(view) }, { 'x-total-count': String(matching.length) });
  };

  const listIps = (url: URL, res: ServerResponse, region: string) => {
    const page = intParam(url, 'page', 1);
    const pageSize = intParam(url, 'page_size', 50);
    if (!Number.isInteger(pageSize) || pageSize < 1 || pageSize > 1000) {
      return invalid(res, 'page_size', 'must be between 1 and 1000');
    }
    const resourceId = url.searchParams.get('resource_id');
    const isIpv6 = url.searchParams.get('is_ipv6');
    const zonal = url.searchParams.get('zonal');
    const ips: unknown[] = [];
    for (const s of servers.values()) {
      if (s.project !== projectId || !s.zone.startsWith(`${region}-`)) continue;
      if (resourceId !== null && s.id !== resourceId) continue;
      if (zonal !== null && s.zone !== zonal) continue;
      s.privateIps.forEach((address, i) => {
        const v6 = address.includes(':');
        if (isIpv6 !== null && String(v6) !== isIpv6) return;
        ips.push({
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
    }
    send(res, 200, { total_count: ips.length, ips: ips.slice((page - 1) * pageSize, page * pageSize) });
  };

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', base);
    const path = url.pathname;
    const serversPath = /^\/instance\/v1\/zones\/([^/]+)\/servers(?:\/([^/]+))?$/.exec(path);
    const ipsPath = /^\/ipam\/v1\/regions\/([^/]+)\/ips$/.exec(path);
    const metadataPath = /^\/metadata\/([^/]+)\/conf$/.exec(path);
    let operation = 'unknown';
    if (req.method === 'GET' && serversPath) operation = serversPath[2] ? 'servers.get' : 'servers.list';
    else if (req.method === 'GET' && ipsPath) operation = 'ips.list';
    else if (req.method === 'GET' && metadataPath) operation = 'metadata';
    calls.push({ operation, path: `${path}${url.search}` });

    const fault = planFault(operation);
    if (fault?.delayMs) await new Promise((resolve) => setTimeout(resolve, fault.delayMs));
    if (fault?.drop) {
      req.socket.destroy();
      return;
    }
    if (fault?.status === 429) {
      const reset = fault.resetSeconds ?? 1;
      send(
        res,
        429,
        {
          type: 'too_many_requests',
          message: 'too many requests',
          help_message: 'simulated rate limit',
          limit: { quota: 100, window_seconds: 1 },
          reset_seconds: reset,
        },
        { 'retry-after': String(reset), 'x-ratelimit-limit': '100', 'x-ratelimit-remaining': '0' },
      );
      return;
    }
    if (fault?.status) {
      send(res, fault.status, { message: `simulated fault ${fault.status}`, type: 'internal_error' });
      return;
    }

    if (operation === 'metadata') {
      const s = servers.get(decodeURIComponent(metadataPath?.[1] ?? ''));
      if (!s || url.searchParams.get('format') !== 'json') {
        res.writeHead(404).end('not found');
        return;
      }
      send(res, 200, {
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
      });
      return;
    }
    if (operation === 'unknown') return notFound(res, 'route');
    if (req.headers['x-auth-token'] !== secretKey) {
      send(res, 401, {
        type: 'denied_authentication',
        method: 'api_key',
        reason: 'invalid_argument',
        message: 'authentication is denied',
      });
      return;
    }
    if (operation === 'ips.list') return listIps(url, res, ipsPath?.[1] as string);
    const inZone = serversPath?.[1] as string;
    if (operation === 'servers.list') return listServers(url, res, inZone);
    const s = servers.get(decodeURIComponent(serversPath?.[2] as string));
    if (!s || s.zone !== inZone || s.project !== projectId) return notFound(res, 'instance_server');
    send(res, 200, { server: view(s) });
  };

  const server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      if (!res.headersSent) send(res, 500, { message: (err as Error).message });
    });
  });
  const listener = await listenOnLoopback(server);
  base = listener.url;

  const existing = (id: string) => {
    const found = servers.get(id);
    if (!found) throw new Error(`no simulated server ${id}`);
    return found;
  };
  const credentials: ScalewayCredentials = { accessKey, secretKey, projectId, zone, apiUrl: base };

  return {
    apiUrl: base,
    zone,
    projectId,
    credentials,
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
    setState: (id, state) => {
      existing(id).state = state;
    },
    deleteServer: (id) => {
      existing(id);
      servers.delete(id);
    },
    metadataUrl: (id) => `${base}/metadata/${encodeURIComponent(id)}/conf?format=json`,
    failNext: (times, status, operation) =>
      faults.push({ times, status, ...(operation ? { operation } : {}) }),
    throttleNext: (times, resetSeconds, operation) =>
      faults.push({ times, status: 429, resetSeconds, ...(operation ? { operation } : {}) }),
    delayNext: (times, delayMs, operation) =>
      faults.push({ times, delayMs, ...(operation ? { operation } : {}) }),
    dropNext: (times, operation) => faults.push({ times, drop: true, ...(operation ? { operation } : {}) }),
    resetFaults: () => {
      faults = [];
    },
    calls,
    count: (operation) => calls.filter((c) => c.operation === operation).length,
    clearCalls: () => {
      calls.length = 0;
    },
    close: () => listener.close(),
  };
}
