/**
 * The plumbing the bearer-token REST simulators share (Hetzner Cloud, DigitalOcean, Linode): a
 * loopback HTTP server with a route table, bearer-token auth, a rate limit that answers 429 as the
 * provider does, and the request log and fault injection of every cloud simulator (cloud-sim.ts).
 * Each provider's simulator supplies its routes, its error envelope and its rate-limit headers.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { listenOnLoopback } from '../net/loopback.ts';
import { TokenBucket } from '../runtime/token-bucket.ts';
import { applyTransportFault, CallLog, FaultQueue, type SimFault } from './cloud-sim.ts';

/** One request the simulator served. */
export interface SimCall {
  operation: string;
  method: string;
  path: string;
  query: URLSearchParams;
  /** The status answered; undefined while unanswered or when the connection was dropped. */
  status?: number;
}

/** What a route answers: a status and a JSON (or text) body. */
export interface SimAnswer {
  status: number;
  body: unknown;
  headers?: Record<string, string>;
}

/** One route: method, a path pattern with named groups, and its handler. */
export interface SimRoute {
  operation: string;
  method: string;
  pattern: RegExp;
  /** Whether the route needs the API token (the metadata service does not). */
  auth: boolean;
  /** A limit of the route's own, counted apart from the simulator's (Linode limits collections apart). */
  rateLimit?: SimRateLimit;
  handle(match: Record<string, string>, query: URLSearchParams, req: IncomingMessage): SimAnswer;
}

/** What the rate limit says about one request, for the provider's headers. */
export interface RateLimitState {
  allowed: boolean;
  limit: number;
  /** Requests left after this one. */
  remaining: number;
  /** When the bucket is full again (epoch ms). */
  fullAtMs: number;
  /** When the next request will be allowed (epoch ms; now when some are left). */
  nextAtMs: number;
}

/**
 * The provider's rate limit: a bucket of `limit` requests refilled evenly over `windowMs` (Hetzner:
 * 3,600 an hour, one back each second), and the headers it reports on every answer and the 429.
 */
export interface SimRateLimit {
  limit: number;
  windowMs: number;
  headers(state: RateLimitState): Record<string, string>;
}

/**
 * A limit reported in the `RateLimit-Limit`/`-Remaining`/`-Reset` headers Hetzner and DigitalOcean
 * send, `-Reset` being when the bucket is full again (`full`, Hetzner) or when the next request is
 * allowed (`next`, DigitalOcean).
 */
export function rateLimitHeadersLimit(limit: number, windowMs: number, reset: 'full' | 'next'): SimRateLimit {
  return {
    limit,
    windowMs,
    headers: (state) => ({
      'ratelimit-limit': String(state.limit),
      'ratelimit-remaining': String(state.remaining),
      'ratelimit-reset': String(Math.ceil((reset === 'full' ? state.fullAtMs : state.nextAtMs) / 1000)),
    }),
  };
}

/** Takes one request from `bucket` (of `limit`) and says what the provider's headers report. */
function takeFrom(bucket: TokenBucket, limit: SimRateLimit): RateLimitState {
  const now = Date.now();
  const allowed = bucket.tryTake(now);
  const tokens = bucket.tokens(now);
  return {
    allowed,
    limit: limit.limit,
    remaining: Math.floor(tokens),
    fullAtMs: now + Math.ceil(((limit.limit - tokens) * limit.windowMs) / limit.limit),
    nextAtMs: allowed ? now : now + Math.ceil(bucket.msUntilToken(now)),
  };
}

/** Options of {@link startRestSimulator}. */
export interface RestSimulatorOptions {
  routes: SimRoute[];
  token: string;
  /** The provider's error envelope for a status and message. */
  errorBody(status: number, message: string): unknown;
  rateLimit?: SimRateLimit;
}

/** A running simulator's controls. */
export interface RestSimulator {
  url: string;
  readonly calls: readonly SimCall[];
  /** Served requests of one operation (with `status`, only those answered with it). */
  count(operation: string, status?: number): number;
  clearCalls(): void;
  /** Injects a fault for the next requests. */
  fault(fault: SimFault): void;
  /** Removes every fault not yet spent. */
  clearFaults(): void;
  /** Replaces the default rate limit (e.g. a tiny one to see 429s); undefined turns every limit off. */
  setRateLimit(limit: SimRateLimit | undefined): void;
  close(): Promise<void>;
}

function send(res: ServerResponse, answer: SimAnswer): void {
  const text = typeof answer.body === 'string' ? answer.body : JSON.stringify(answer.body);
  res.writeHead(answer.status, {
    'content-type': typeof answer.body === 'string' ? 'text/plain' : 'application/json',
    'content-length': Buffer.byteLength(text),
    ...answer.headers,
  });
  res.end(text);
}

/** The limits in force: the simulator's default and the routes' own, one bucket each, or none. */
class RateLimits {
  #default: SimRateLimit | undefined;
  #on = true;
  readonly #buckets = new Map<SimRateLimit, TokenBucket>();

  constructor(limit: SimRateLimit | undefined) {
    this.#default = limit;
  }

  /** Takes one request from the route's bucket; undefined when no limit applies. */
  take(route: SimRoute): { allowed: boolean; headers: Record<string, string> } | undefined {
    const limit = this.#on && route.auth ? (route.rateLimit ?? this.#default) : undefined;
    if (!limit) return undefined;
    const bucket =
      this.#buckets.get(limit) ??
      new TokenBucket({ burst: limit.limit, perSecond: (limit.limit * 1000) / limit.windowMs }, Date.now());
    this.#buckets.set(limit, bucket);
    const taken = takeFrom(bucket, limit);
    return { allowed: taken.allowed, headers: limit.headers(taken) };
  }

  set(limit: SimRateLimit | undefined): void {
    this.#on = limit !== undefined;
    if (limit) this.#default = limit;
    this.#buckets.clear();
  }
}

/** The route a request takes and the named groups its pattern matched. */
function routeOf(routes: readonly SimRoute[], method: string | undefined, path: string) {
  for (const route of routes) {
    const m = route.method === method ? route.pattern.exec(path) : null;
    if (m) return { route, match: m.groups ?? {} };
  }
  return undefined;
}

/** What one simulator serves with. */
interface RestState {
  options: RestSimulatorOptions;
  log: CallLog<SimCall>;
  faults: FaultQueue;
  limits: RateLimits;
}

/** One request: logged, then its fault, the rate limit, the token, and the route's answer, in that order. */
async function serveRest(state: RestState, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const { options } = state;
  const url = new URL(req.url ?? '/', 'http://sim');
  const error = (status: number, message: string, headers?: Record<string, string>) =>
    send(res, { status, body: options.errorBody(status, message), ...(headers ? { headers } : {}) });
  const found = routeOf(options.routes, req.method, url.pathname);
  if (!found) return error(404, `no route for ${req.method} ${url.pathname}`);
  const { route, match } = found;
  const call = state.log.add({
    operation: route.operation,
    method: req.method ?? 'GET',
    path: url.pathname,
    query: url.searchParams,
  });
  res.on('finish', () => {
    call.status = res.statusCode;
  });
  const fault = state.faults.take(route.operation);
  if (await applyTransportFault(fault, req)) return;
  const limited = state.limits.take(route);
  const limitHeaders = limited?.headers ?? {};
  if (limited && !limited.allowed) return error(429, 'rate limit exceeded', limitHeaders);
  if (fault?.status) return error(fault.status, `injected fault: HTTP ${fault.status}`, limitHeaders);
  if (route.auth && req.headers.authorization !== `Bearer ${options.token}`) {
    return error(401, 'unable to authenticate');
  }
  const answer = route.handle(match, url.searchParams, req);
  send(res, { ...answer, headers: { ...limitHeaders, ...answer.headers } });
}

/** Starts a simulator on 127.0.0.1. */
export async function startRestSimulator(options: RestSimulatorOptions): Promise<RestSimulator> {
  const state: RestState = {
    options,
    log: new CallLog<SimCall>(),
    faults: new FaultQueue(),
    limits: new RateLimits(options.rateLimit),
  };
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => void serveRest(state, req, res));
  });
  const listener = await listenOnLoopback(server);
  return {
    url: listener.url,
    calls: state.log.calls,
    count: (operation, status) => state.log.count(operation, status),
    clearCalls: () => state.log.clear(),
    fault: (fault) => state.faults.add(fault),
    clearFaults: () => state.faults.clear(),
    setRateLimit: (limit) => state.limits.set(limit),
    close: () => listener.close(),
  };
}

/** The page of `items` that `page` (1-based) and `perPage` ask for, and the number of pages. */
export function pageOf<T>(
  items: readonly T[],
  page: number,
  perPage: number,
): { items: T[]; lastPage: number } {
  const lastPage = Math.max(1, Math.ceil(items.length / perPage));
  return { items: items.slice((page - 1) * perPage, page * perPage), lastPage };
}

/** A positive integer query parameter within bounds, or the default; undefined when malformed. */
export function intParam(
  query: URLSearchParams,
  name: string,
  fallback: number,
  max: number,
): number | undefined {
  const raw = query.get(name);
  if (raw === null) return fallback;
  if (!/^\d+$/.test(raw)) return undefined;
  const value = Number(raw);
  return value >= 1 && value <= max ? value : undefined;
}

/**
 * The metadata service of a cloud whose values are one text file per key (Hetzner, DigitalOcean):
 * `pattern` names the server (`node`) and the key; `values` is what that server sees, undefined for
 * none. No token: a server's metadata service answers only that server.
 */
export function metadataKeysRoute(
  pattern: RegExp,
  values: (node: number) => Record<string, string> | undefined,
): SimRoute {
  return {
    operation: 'metadata',
    method: 'GET',
    pattern,
    auth: false,
    handle: ({ node, key }) => {
      const value = key ? values(Number(node))?.[key] : undefined;
      return value === undefined ? { status: 404, body: 'not found' } : { status: 200, body: value };
    },
  };
}

/** The servers of a simulated account, and how tests add them. */
export interface SimServerStore<T, Seed> {
  servers: Map<number, T>;
  /** Adds the server `seed` describes, under the next id. */
  add(seed?: Seed): T;
  /** Adds `count` servers named `<group>-<i>`, each from the seed `seedOf` gives for its name. */
  addGroup(instanceGroup: string, count: number, seedOf: (name: string) => Seed): T[];
}

/**
 * A simulated account's servers by id, numbered from `firstId` on as the cloud numbers them. `create`
 * builds the server for an id from a seed; `n` counts the servers from 1 (for distinct addresses).
 */
export function simServerStore<T, Seed>(
  firstId: number,
  create: (id: number, n: number, seed: Seed) => T,
  emptySeed: Seed,
): SimServerStore<T, Seed> {
  const servers = new Map<number, T>();
  let nextId = firstId;
  const add = (seed: Seed = emptySeed): T => {
    const id = nextId++;
    const server = create(id, id - firstId + 1, seed);
    servers.set(id, server);
    return server;
  };
  return {
    servers,
    add,
    addGroup: (instanceGroup, count, seedOf) =>
      Array.from({ length: count }, (_, i) => add(seedOf(`${instanceGroup}-${i}`))),
  };
}
