/**
 * A Hetzner Cloud simulator on loopback: the servers API the controller reads (`GET /v1/servers/{id}`,
 * `GET /v1/servers` with `label_selector` and `page`/`per_page` pagination under `meta.pagination`),
 * Hetzner's error envelope and codes, its rate limit (3,600 requests per hour by default, reported in
 * `RateLimit-Limit`/`-Remaining`/`-Reset`, 429 `rate_limit_exceeded` beyond it), and each server's
 * metadata service (`/hetzner/v1/metadata/instance-id`, `private-networks`) under a per-server base URL.
 */
import type { HetznerServer } from '../../cloud/hetzner/servers.ts';
import { kopsRoleOf, nthPrivateAddress } from '../cloud-sim.ts';
import {
  intParam,
  metadataKeysRoute,
  pageOf,
  type RestSimulator,
  rateLimitHeadersLimit,
  type SimAnswer,
  type SimRateLimit,
  type SimRoute,
  simServerStore,
  startRestSimulator,
} from '../rest-sim.ts';

/** A server of the simulated project. */
export interface SimHetznerServer {
  id: number;
  name: string;
  status: string;
  labels: Record<string, string>;
  /** Addresses on private networks (the first is where the callback challenge is answered). */
  privateIps: string[];
  publicIp?: string;
  location: string;
  /**
   * When it was created, as the API writes it (RFC 3339 to the second, `+00:00`:
   * `2016-01-30T23:55:00+00:00`, docs.hetzner.cloud); a test may put anything here.
   */
  created: string;
}

/** What a seeded server starts as. */
export type SeedHetznerServer = Partial<Omit<SimHetznerServer, 'id'>> & { name?: string };

/** A running Hetzner simulator. */
export interface HetznerSimulator extends Omit<RestSimulator, 'url'> {
  /** The API base URL (`…/v1`), for the client's endpoint. */
  endpoint: string;
  /** The API token the simulator accepts. */
  token: string;
  servers: Map<number, SimHetznerServer>;
  /** Adds a server; returns it with its id. */
  addServer(seed?: SeedHetznerServer): SimHetznerServer;
  /** Adds `count` running servers of one instance group of one cluster. */
  addGroup(clusterName: string, instanceGroup: string, count: number): SimHetznerServer[];
  /** The metadata service base URL the server `id` sees (`…/hetzner/v1/metadata`). */
  metadataUrl(id: number): string;
}

/** Hetzner's error codes by status. */
const codes: Record<number, string> = {
  400: 'invalid_input',
  401: 'unauthorized',
  403: 'forbidden',
  404: 'not_found',
  409: 'conflict',
  423: 'locked',
  429: 'rate_limit_exceeded',
  500: 'server_error',
  503: 'unavailable',
  504: 'timeout',
};

/** The default project limit: 3,600 requests per hour. */
export function hetznerRateLimit(limit = 3600, windowMs = 3_600_000): SimRateLimit {
  // Hetzner sends no Retry-After: Reset is when the bucket is full again (one request per second back).
  return rateLimitHeadersLimit(limit, windowMs, 'full');
}

/** A time as the Hetzner API writes it: `2016-01-30T23:55:00+00:00`. */
export function hetznerTime(date: Date): string {
  return date.toISOString().replace(/\.\d{3}Z$/, '+00:00');
}

/** The API form of a server. */
function serverJson(s: SimHetznerServer): HetznerServer {
  return {
    id: s.id,
    name: s.name,
    status: s.status,
    created: s.created,
    public_net: { ipv4: s.publicIp ? { ip: s.publicIp } : null, ipv6: null },
    private_net: s.privateIps.map((ip) => ({ network: 1, ip, alias_ips: [] })),
    labels: s.labels,
    // Since 2026-07-01 the API names the location at the top level; `datacenter` is gone.
    location: { name: s.location },
  };
}

/** Hetzner label selectors: `k=v`, `k!=v`, `k`, `!k`, joined by commas (all must hold). */
function compileSelector(selector: string): ((labels: Record<string, string>) => boolean) | undefined {
  const terms = selector.split(',').map((term) => {
    const m = /^(!?)([\w./-]+)(?:(!=|==|=)([\w.-]*))?$/.exec(term.trim());
    if (!m) return undefined;
    const [, not, key = '', op, value] = m;
    if (not) return op ? undefined : (l: Record<string, string>) => !(key in l);
    if (!op) return (l: Record<string, string>) => key in l;
    return op === '!='
      ? (l: Record<string, string>) => l[key] !== value
      : (l: Record<string, string>) => l[key] === value;
  });
  if (terms.some((t) => t === undefined)) return undefined;
  return (labels) => terms.every((t) => t?.(labels));
}

const errorBody = (status: number, message: string) => ({
  error: { code: codes[status] ?? 'server_error', message, details: {} },
});

/** `GET /v1/servers`: the servers a label selector matches, in `page`/`per_page` pages. */
function listServers(servers: Map<number, SimHetznerServer>, query: URLSearchParams): SimAnswer {
  const page = intParam(query, 'page', 1, 1_000_000);
  const perPage = intParam(query, 'per_page', 25, 50);
  if (page === undefined || perPage === undefined) {
    return { status: 400, body: errorBody(400, 'invalid input in fields page, per_page') };
  }
  const selector = query.get('label_selector');
  const matches = selector ? compileSelector(selector) : () => true;
  if (!matches) return { status: 400, body: errorBody(400, `invalid label_selector "${selector}"`) };
  const all = [...servers.values()].filter((s) => matches(s.labels)).sort((a, b) => a.id - b.id);
  const { items, lastPage } = pageOf(all, page, perPage);
  const pagination = {
    page,
    per_page: perPage,
    previous_page: page > 1 ? page - 1 : null,
    next_page: page < lastPage ? page + 1 : null,
    last_page: lastPage,
    total_entries: all.length,
  };
  return { status: 200, body: { servers: items.map(serverJson), meta: { pagination } } };
}

/** The metadata service's keys as `server` reads them. */
function metadataValues(server: SimHetznerServer): Record<string, string> {
  return {
    'instance-id': String(server.id),
    hostname: server.name,
    'private-networks': server.privateIps.map((ip) => `- ip: ${ip}\n`).join(''),
  };
}

/** The servers API and the metadata service. */
function hetznerRoutes(servers: Map<number, SimHetznerServer>): SimRoute[] {
  return [
    {
      operation: 'servers.get',
      method: 'GET',
      pattern: /^\/v1\/servers\/(?<id>[^/]+)$/,
      auth: true,
      handle: ({ id = '' }) => {
        if (!/^\d+$/.test(id)) return { status: 400, body: errorBody(400, 'invalid server id') };
        const server = servers.get(Number(id));
        if (!server) return { status: 404, body: errorBody(404, `server with ID '${id}' not found`) };
        return { status: 200, body: { server: serverJson(server) } };
      },
    },
    {
      operation: 'servers.list',
      method: 'GET',
      pattern: /^\/v1\/servers$/,
      auth: true,
      handle: (_, query) => listServers(servers, query),
    },
    metadataKeysRoute(/^\/_node\/(?<node>\d+)\/hetzner\/v1\/metadata\/(?<key>[\w-]+)$/, (node) => {
      const server = servers.get(node);
      return server && metadataValues(server);
    }),
  ];
}

/** Starts the simulator; `rateLimit` defaults to Hetzner's 3,600 requests per hour. */
export async function startHetznerSimulator(
  options: { rateLimit?: SimRateLimit } = {},
): Promise<HetznerSimulator> {
  const token = 'sim-hcloud-token';
  const store = simServerStore<SimHetznerServer, SeedHetznerServer>(
    1_000_001,
    (id, n, seed) => ({
      id,
      name: seed.name ?? `server-${id}`,
      status: seed.status ?? 'running',
      labels: seed.labels ?? {},
      privateIps: seed.privateIps ?? [nthPrivateAddress(n)],
      location: seed.location ?? 'fsn1',
      created: seed.created ?? hetznerTime(new Date()),
      ...(seed.publicIp ? { publicIp: seed.publicIp } : {}),
    }),
    {},
  );
  const sim = await startRestSimulator({
    token,
    errorBody,
    rateLimit: options.rateLimit ?? hetznerRateLimit(),
    routes: hetznerRoutes(store.servers),
  });
  const { url, ...controls } = sim;
  return {
    ...controls,
    endpoint: `${url}/v1`,
    token,
    servers: store.servers,
    addServer: store.add,
    addGroup: (clusterName, instanceGroup, count) =>
      store.addGroup(instanceGroup, count, (name) => ({
        name,
        labels: {
          'kops.k8s.io/cluster': clusterName,
          'kops.k8s.io/instance-group': instanceGroup,
          'kops.k8s.io/instance-role': kopsRoleOf(instanceGroup),
        },
      })),
    metadataUrl: (id) => `${url}/_node/${id}/hetzner/v1/metadata`,
  };
}
