/**
 * A DigitalOcean simulator on loopback: the droplets API the controller reads (`GET /v2/droplets/{id}`,
 * `GET /v2/droplets?tag_name=` with `page`/`per_page` pagination, `links.pages` and `meta.total`),
 * DigitalOcean's error envelope (`{ id, message }`), its rate limit (250 requests per minute by
 * default — the hourly 5,000 is the tighter one only past 20 minutes of full use — reported in
 * `ratelimit-limit`/`-remaining`/`-reset`, 429 `too_many_requests` beyond it), and each droplet's
 * metadata service (`/metadata/v1/id`, `/metadata/v1/hostname`, `/metadata/v1/region`) under a
 * per-droplet base URL.
 */
import type { Droplet } from '../../cloud/digitalocean/droplets.ts';
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

/** A droplet of the simulated account. */
export interface SimDroplet {
  id: number;
  name: string;
  status: string;
  tags: string[];
  privateIp?: string;
  publicIp?: string;
  region: string;
  /**
   * When it was created, as the API writes `created_at` (RFC 3339 to the second, `Z`:
   * `2020-07-21T18:37:44Z`); a test may put anything here.
   */
  createdAt: string;
}

/** A running DigitalOcean simulator. */
export interface DigitalOceanSimulator extends Omit<RestSimulator, 'url'> {
  /** The API base URL (`…/v2`). */
  endpoint: string;
  token: string;
  droplets: Map<number, SimDroplet>;
  addDroplet(seed?: Partial<Omit<SimDroplet, 'id'>>): SimDroplet;
  /** Adds `count` active droplets tagged as kops tags one instance group of one cluster. */
  addGroup(clusterName: string, instanceGroup: string, count: number): SimDroplet[];
  /** The metadata service base URL droplet `id` sees (`…/metadata/v1`). */
  metadataUrl(id: number): string;
}

const errorIds: Record<number, string> = {
  400: 'bad_request',
  401: 'unauthorized',
  403: 'forbidden',
  404: 'not_found',
  422: 'unprocessable_entity',
  429: 'too_many_requests',
  500: 'server_error',
  503: 'service_unavailable',
};

/** 250 requests per minute, refilled evenly; `ratelimit-reset` is when the oldest counted request expires. */
export function digitalOceanRateLimit(limit = 250, windowMs = 60_000): SimRateLimit {
  return rateLimitHeadersLimit(limit, windowMs, 'next');
}

/** A time as the DigitalOcean API writes it: `2020-07-21T18:37:44Z`. */
export function digitalOceanTime(date: Date): string {
  return date.toISOString().replace(/\.\d{3}Z$/, 'Z');
}

function dropletJson(d: SimDroplet): Droplet {
  return {
    id: d.id,
    name: d.name,
    status: d.status,
    created_at: d.createdAt,
    networks: {
      v4: [
        ...(d.privateIp ? [{ ip_address: d.privateIp, type: 'private' }] : []),
        ...(d.publicIp ? [{ ip_address: d.publicIp, type: 'public' }] : []),
      ],
      v6: [],
    },
    tags: d.tags,
    region: { slug: d.region },
  };
}

const errorBody = (status: number, message: string) => ({ id: errorIds[status] ?? 'server_error', message });

/** `GET /v2/droplets`: the droplets carrying `tag_name`, paged, each page linking its neighbours. */
function listDroplets(droplets: Map<number, SimDroplet>, base: string, query: URLSearchParams): SimAnswer {
  const page = intParam(query, 'page', 1, 1_000_000);
  const perPage = intParam(query, 'per_page', 20, 200);
  if (page === undefined || perPage === undefined) {
    return { status: 400, body: errorBody(400, 'page and per_page must be positive; per_page at most 200') };
  }
  const tag = query.get('tag_name');
  const all = [...droplets.values()]
    .filter((d) => tag === null || d.tags.includes(tag))
    .sort((a, b) => a.id - b.id);
  const { items, lastPage } = pageOf(all, page, perPage);
  const link = (p: number) => {
    const url = new URL(`${base}/v2/droplets`);
    if (tag !== null) url.searchParams.set('tag_name', tag);
    url.searchParams.set('page', String(p));
    url.searchParams.set('per_page', String(perPage));
    return url.toString();
  };
  const pages: Record<string, string> = {};
  if (page > 1) Object.assign(pages, { first: link(1), prev: link(page - 1) });
  if (page < lastPage) Object.assign(pages, { next: link(page + 1), last: link(lastPage) });
  return {
    status: 200,
    body: { droplets: items.map(dropletJson), links: { pages }, meta: { total: all.length } },
  };
}

/** The droplets API and the metadata service; `base` is the simulator's URL, for page links. */
function digitalOceanRoutes(droplets: Map<number, SimDroplet>, base: () => string): SimRoute[] {
  return [
    {
      operation: 'droplets.get',
      method: 'GET',
      pattern: /^\/v2\/droplets\/(?<id>[^/]+)$/,
      auth: true,
      handle: ({ id = '' }) => {
        const droplet = /^\d+$/.test(id) ? droplets.get(Number(id)) : undefined;
        if (!droplet) {
          return { status: 404, body: errorBody(404, 'The resource you were accessing could not be found.') };
        }
        return { status: 200, body: { droplet: dropletJson(droplet) } };
      },
    },
    {
      operation: 'droplets.list',
      method: 'GET',
      pattern: /^\/v2\/droplets$/,
      auth: true,
      handle: (_, query) => listDroplets(droplets, base(), query),
    },
    metadataKeysRoute(/^\/_node\/(?<node>\d+)\/metadata\/v1\/(?<key>[\w-]+)$/, (node) => {
      const droplet = droplets.get(node);
      return droplet && { id: String(droplet.id), hostname: droplet.name, region: droplet.region };
    }),
  ];
}

/** The private address a seeded droplet gets: the seed's (none when it says `privateIp: undefined`), else the `n`th. */
function seededPrivateIp(seed: Partial<Omit<SimDroplet, 'id'>>, n: number): { privateIp?: string } {
  if (!('privateIp' in seed)) return { privateIp: nthPrivateAddress(n) };
  return seed.privateIp ? { privateIp: seed.privateIp } : {};
}

/** Starts the simulator; `rateLimit` defaults to DigitalOcean's 250 requests per minute. */
export async function startDigitalOceanSimulator(
  options: { rateLimit?: SimRateLimit } = {},
): Promise<DigitalOceanSimulator> {
  const token = 'sim-do-token';
  const store = simServerStore<SimDroplet, Partial<Omit<SimDroplet, 'id'>>>(
    300_000_001,
    (id, n, seed) => ({
      id,
      name: seed.name ?? `droplet-${id}`,
      status: seed.status ?? 'active',
      tags: seed.tags ?? [],
      region: seed.region ?? 'nyc3',
      createdAt: seed.createdAt ?? digitalOceanTime(new Date()),
      ...seededPrivateIp(seed, n),
      ...(seed.publicIp ? { publicIp: seed.publicIp } : {}),
    }),
    {},
  );
  let base = '';
  const sim = await startRestSimulator({
    token,
    errorBody,
    rateLimit: options.rateLimit ?? digitalOceanRateLimit(),
    routes: digitalOceanRoutes(store.servers, () => base),
  });
  base = sim.url;
  const { url, ...controls } = sim;
  return {
    ...controls,
    endpoint: `${url}/v2`,
    token,
    droplets: store.servers,
    addDroplet: store.add,
    addGroup: (clusterName, instanceGroup, count) =>
      store.addGroup(instanceGroup, count, (name) => ({
        name,
        tags: [
          `KubernetesCluster:${clusterName.replaceAll('.', '-')}`,
          `kops-instancegroup:${instanceGroup}`,
          `kops-instance-role:${kopsRoleOf(instanceGroup)}`,
        ],
      })),
    metadataUrl: (id) => `${url}/_node/${id}/metadata/v1`,
  };
}
