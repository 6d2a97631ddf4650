/**
 * An Akamai (Linode) simulator on loopback, so that the official SDK (`@linode/api-v4`) runs against
 * it unchanged: `GET /v4/linode/instances/{id}`, `GET /v4beta/linode/instances` (and `/v4/…`) with
 * `page`/`page_size` (25–500) and an `X-Filter` header, Linode's error envelope
 * (`{ errors: [{ reason }] }`), its per-token rate limits — 200 requests per minute for paginated
 * collections, 1,600 per minute for other operations — answered 429 with `Retry-After` and
 * `X-RateLimit-*`, and each instance's metadata service with its token dance (`PUT /v1/token`, then
 * `GET /v1/instance` with `Metadata-Token`) under a per-instance base URL.
 */
import { randomBytes } from 'node:crypto';
import type { Linode } from '../../cloud/linode/instances.ts';
import { kopsRoleOf } from '../cloud-sim.ts';
import {
  intParam,
  pageOf,
  type RestSimulator,
  type SimAnswer,
  type SimRateLimit,
  type SimRoute,
  simServerStore,
  startRestSimulator,
} from '../rest-sim.ts';

/** An instance of the simulated account. */
export interface SimLinode {
  id: number;
  label: string;
  status: string;
  tags: string[];
  /** IPv4 addresses, public and private (192.168.128.0/17), as the API lists them. */
  ipv4: string[];
  region: string;
  /**
   * When it was created, as the API writes it: UTC to the second, without an offset
   * (`2018-01-01T00:01:01`); a test may put anything here.
   */
  created: string;
}

/** A running Linode simulator. */
export interface LinodeSimulator extends Omit<RestSimulator, 'url'> {
  /** The API origin, for the client's `origin` (the SDK appends `/v4/...`). */
  origin: string;
  token: string;
  instances: Map<number, SimLinode>;
  addInstance(seed?: Partial<Omit<SimLinode, 'id'>>): SimLinode;
  /** Adds `count` running instances tagged as kops tags one instance group of one cluster. */
  addGroup(clusterName: string, instanceGroup: string, count: number): SimLinode[];
  /** The metadata service base URL instance `id` sees (kops: `http://169.254.169.254`). */
  metadataUrl(id: number): string;
}

/** Linode's limits: `limit` requests per minute, reported in `X-RateLimit-*` and `Retry-After` on a 429. */
export function linodeRateLimit(limit: number, windowMs = 60_000): SimRateLimit {
  return {
    limit,
    windowMs,
    headers: (state) => ({
      'x-ratelimit-limit': String(state.limit),
      'x-ratelimit-remaining': String(state.remaining),
      'x-ratelimit-reset': String(Math.ceil(state.fullAtMs / 1000)),
      ...(state.allowed
        ? {}
        : { 'retry-after': String(Math.max(1, Math.ceil((state.nextAtMs - Date.now()) / 1000))) }),
    }),
  };
}

/** A time as the Linode API writes it: `2018-01-01T00:01:01` (UTC). */
export function linodeTime(date: Date): string {
  return date.toISOString().replace(/\.\d{3}Z$/, '');
}

function linodeJson(l: SimLinode): Linode {
  return {
    id: l.id,
    label: l.label,
    status: l.status,
    created: l.created,
    ipv4: l.ipv4,
    ipv6: null,
    tags: l.tags,
    region: l.region,
  };
}

/** The X-Filter forms the simulator understands: `{ field: value }`, `{ field: { "+contains": value } }`, `"+and"`. */
function compileFilter(header: string | undefined): ((l: SimLinode) => boolean) | undefined {
  if (!header) return () => true;
  let filter: unknown;
  try {
    filter = JSON.parse(header);
  } catch {
    return undefined;
  }
  const one = (f: unknown): ((l: SimLinode) => boolean) | undefined => {
    if (typeof f !== 'object' || f === null || Array.isArray(f)) return undefined;
    const tests = Object.entries(f).map(([key, value]) => {
      if (key === '+and' && Array.isArray(value)) {
        const parts = value.map(one);
        return parts.every((p) => p) ? (l: SimLinode) => parts.every((p) => p?.(l)) : undefined;
      }
      const field = (l: SimLinode): unknown => (l as unknown as Record<string, unknown>)[key];
      if (typeof value === 'string' || typeof value === 'number') {
        return (l: SimLinode) => {
          const v = field(l);
          return Array.isArray(v) ? v.includes(value) : v === value;
        };
      }
      const contains = (value as Record<string, unknown> | null)?.['+contains'];
      if (typeof contains === 'string') {
        return (l: SimLinode) => {
          const v = field(l);
          return Array.isArray(v)
            ? v.some((x) => String(x).includes(contains))
            : String(v).includes(contains);
        };
      }
      return undefined;
    });
    return tests.every((t) => t) ? (l) => tests.every((t) => t?.(l)) : undefined;
  };
  return one(filter);
}

const errorBody = (_status: number, message: string) => ({ errors: [{ reason: message }] });

/** `GET /v4beta/linode/instances`: the instances the X-Filter matches, in `page`/`page_size` pages. */
function listInstances(
  instances: Map<number, SimLinode>,
  query: URLSearchParams,
  filter: string | undefined,
): SimAnswer {
  const page = intParam(query, 'page', 1, 1_000_000);
  const pageSize = query.has('page_size') ? intParam(query, 'page_size', 100, 500) : 100;
  if (page === undefined || pageSize === undefined || pageSize < 25) {
    return {
      status: 400,
      body: { errors: [{ reason: 'Must be a value between 25 and 500.', field: 'page_size' }] },
    };
  }
  const matches = compileFilter(filter);
  if (!matches) {
    return { status: 400, body: { errors: [{ reason: 'Cannot filter on this value', field: 'X-Filter' }] } };
  }
  const all = [...instances.values()].filter(matches).sort((a, b) => a.id - b.id);
  const { items, lastPage } = pageOf(all, page, pageSize);
  // Linode answers a filter that matches nothing with `page: 0`, `pages: 0` (linode_api4-python #192).
  const none = all.length === 0;
  return {
    status: 200,
    body: {
      data: items.map(linodeJson),
      page: none ? 0 : page,
      pages: none ? 0 : lastPage,
      results: all.length,
    },
  };
}

/** The instances API: one by id, and the collection under its own (tighter) limit. */
function instanceRoutes(instances: Map<number, SimLinode>): SimRoute[] {
  return [
    {
      operation: 'linode.instances.get',
      method: 'GET',
      pattern: /^\/v4(?:beta)?\/linode\/instances\/(?<id>[^/]+)$/,
      auth: true,
      handle: ({ id = '' }) => {
        const instance = /^\d+$/.test(id) ? instances.get(Number(id)) : undefined;
        if (!instance) return { status: 404, body: errorBody(404, 'Not found') };
        return { status: 200, body: linodeJson(instance) };
      },
    },
    {
      operation: 'linode.instances.list',
      method: 'GET',
      pattern: /^\/v4(?:beta)?\/linode\/instances$/,
      auth: true,
      rateLimit: linodeRateLimit(200),
      handle: (_, query, req) =>
        listInstances(instances, query, req.headers['x-filter'] as string | undefined),
    },
  ];
}

/** The metadata service's token dance: `PUT /v1/token`, then `GET /v1/instance` with that token. */
function metadataRoutes(instances: Map<number, SimLinode>): SimRoute[] {
  const tokens = new Map<string, { instance: number; expiresAt: number }>();
  return [
    {
      operation: 'metadata.token',
      method: 'PUT',
      pattern: /^\/_node\/(?<node>\d+)\/v1\/token$/,
      auth: false,
      handle: ({ node = '' }, _query, req) => {
        const ttl = Number(req.headers['metadata-token-expiry-seconds'] ?? 3600);
        if (!instances.has(Number(node)) || !Number.isInteger(ttl) || ttl < 1 || ttl > 86_400) {
          return { status: 400, body: 'invalid token expiry' };
        }
        const value = randomBytes(16).toString('hex');
        tokens.set(value, { instance: Number(node), expiresAt: Date.now() + ttl * 1000 });
        return { status: 200, body: value };
      },
    },
    {
      operation: 'metadata.instance',
      method: 'GET',
      pattern: /^\/_node\/(?<node>\d+)\/v1\/instance$/,
      auth: false,
      handle: ({ node = '' }, _query, req) => {
        const held = tokens.get(String(req.headers['metadata-token'] ?? ''));
        // A token is good only on the instance it was issued to, and only until it expires.
        if (!held || held.instance !== Number(node) || held.expiresAt < Date.now()) {
          return { status: 401, body: 'Unauthorized' };
        }
        const instance = instances.get(held.instance);
        if (!instance) return { status: 404, body: 'not found' };
        return {
          status: 200,
          body: `id: ${instance.id}\nhost_uuid: ${instance.id.toString(16)}\nlabel: ${instance.label}\nregion: ${instance.region}\n`,
        };
      },
    },
  ];
}

/** Starts the simulator with Linode's documented limits on. */
export async function startLinodeSimulator(): Promise<LinodeSimulator> {
  const token = `sim-linode-token-${randomBytes(8).toString('hex')}`;
  const store = simServerStore<SimLinode, Partial<Omit<SimLinode, 'id'>>>(
    50_000_001,
    (id, n, seed) => ({
      id,
      label: seed.label ?? `linode${id}`,
      status: seed.status ?? 'running',
      tags: seed.tags ?? [],
      ipv4: seed.ipv4 ?? [
        `172.105.${(n >> 8) & 255}.${n & 255}`,
        `192.168.${128 + ((n >> 8) & 127)}.${n & 255}`,
      ],
      region: seed.region ?? 'us-ord',
      created: seed.created ?? linodeTime(new Date()),
    }),
    {},
  );
  const instances = store.servers;
  const sim = await startRestSimulator({
    token,
    errorBody,
    rateLimit: linodeRateLimit(1600),
    routes: [...instanceRoutes(instances), ...metadataRoutes(instances)],
  });
  const { url, ...controls } = sim;
  return {
    ...controls,
    origin: url,
    token,
    instances,
    addInstance: store.add,
    addGroup: (clusterName, instanceGroup, count) =>
      store.addGroup(instanceGroup, count, (label) => ({
        label,
        tags: [
          `kops.k8s.io/cluster:${clusterName}`,
          `kops.k8s.io/instance-group:${instanceGroup}`,
          `kops.k8s.io/instance-role:${kopsRoleOf(instanceGroup)}`,
        ],
      })),
    metadataUrl: (id) => `${url}/_node/${id}`,
  };
}
