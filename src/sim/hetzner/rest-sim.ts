/**
 * The plumbing the callback clouds' simulators share (Hetzner Cloud, DigitalOcean, Linode; shared by
 * src/sim/hetzner, src/sim/digitalocean, src/sim/linode): a loopback HTTP server with a route table,
 * bearer-token auth, a request log by operation, a rate limit that answers 429 as the provider does,
 * and fault injection (error statuses, latency, dropped connections) for the next N requests. Each
 * provider's simulator supplies its routes, its error envelope and its rate-limit headers.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { listenOnLoopback } from '../../net/loopback.ts';

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

/** A fault for the next `times` requests (of `operation`, when given). */
export interface SimFault {
  times: number;
  operation?: string;
  /** Answer this status with the provider's error envelope. */
  status?: number;
  /** Wait this long first. */
  latencyMs?: number;
  /** Close the connection without answering. */
  drop?: boolean;
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

/** A token bucket: `limit` requests, refilled at `limit / windowMs`. */
class TokenBucket {
  #tokens: number;
  #at = Date.now();

  constructor(limit: SimRateLimit) {
    this.#tokens = limit.limit;
  }

  take(limit: SimRateLimit): RateLimitState {
    const now = Date.now();
    const perMs = limit.limit / limit.windowMs;
    this.#tokens = Math.min(limit.limit, this.#tokens + (now - this.#at) * perMs);
    this.#at = now;
    const allowed = this.#tokens >= 1;
    if (allowed) this.#tokens -= 1;
    return {
      allowed,
      limit: limit.limit,
      remaining: Math.floor(this.#tokens),
      fullAtMs: now + Math.ceil((limit.limit - this.#tokens) / perMs),
      nextAtMs: allowed ? now : now + Math.ceil((1 - this.#tokens) / perMs),
    };
  }
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

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function send(res: ServerResponse, answer: SimAnswer): void {
  const text = typeof answer.body === 'string' ? answer.body : JSON.stringify(answer.body);
  res.writeHead(answer.status, {
    'content-type': typeof answer.body === 'string' ? 'text/plain' : 'application/json',
    'content-length': Buffer.byteLength(text),
    ...answer.headers,
  });
  res.end(text);
}

/** Starts a simulator on 127.0.0.1. */
export async function startRestSimulator(options: RestSimulatorOptions): Promise<RestSimulator> {
  const calls: SimCall[] = [];
  let faults: SimFault[] = [];
  let rateLimit = options.rateLimit;
  let limited = true;
  const buckets = new Map<SimRateLimit, TokenBucket>();
  const bucketOf = (limit: SimRateLimit) => {
    const bucket = buckets.get(limit) ?? new TokenBucket(limit);
    buckets.set(limit, bucket);
    return bucket;
  };

  const takeFault = (operation: string): SimFault | undefined => {
    const fault = faults.find((f) => f.operation === undefined || f.operation === operation);
    if (!fault) return undefined;
    fault.times--;
    faults = faults.filter((f) => f.times > 0);
    return fault;
  };

  const serve = async (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', 'http://sim');
    const error = (status: number, message: string, headers?: Record<string, string>) =>
      send(res, { status, body: options.errorBody(status, message), ...(headers ? { headers } : {}) });
    let route: SimRoute | undefined;
    let match: Record<string, string> = {};
    for (const candidate of options.routes) {
      const m = candidate.method === req.method ? candidate.pattern.exec(url.pathname) : null;
      if (m) {
        route = candidate;
        match = m.groups ?? {};
        break;
      }
    }
    if (!route) return error(404, `no route for ${req.method} ${url.pathname}`);
    const call: SimCall = {
      operation: route.operation,
      method: req.method ?? 'GET',
      path: url.pathname,
      query: url.searchParams,
    };
    calls.push(call);
    res.on('finish', () => {
      call.status = res.statusCode;
    });
    const fault = takeFault(route.operation);
    if (fault?.latencyMs) await sleep(fault.latencyMs);
    if (fault?.drop) {
      req.socket.destroy();
      return;
    }
    let limitHeaders: Record<string, string> = {};
    const limit = limited ? (route.rateLimit ?? rateLimit) : undefined;
    if (route.auth && limit) {
      const taken = bucketOf(limit).take(limit);
      limitHeaders = limit.headers(taken);
      if (!taken.allowed) return error(429, 'rate limit exceeded', limitHeaders);
    }
    if (fault?.status) return error(fault.status, `injected fault: HTTP ${fault.status}`, limitHeaders);
    if (route.auth && req.headers.authorization !== `Bearer ${options.token}`) {
      return error(401, 'unable to authenticate');
    }
    const answer = route.handle(match, url.searchParams, req);
    send(res, { ...answer, headers: { ...limitHeaders, ...answer.headers } });
  };

  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => void serve(req, res));
  });
  const listener = await listenOnLoopback(server);
  return {
    url: listener.url,
    calls,
    count: (operation, status) =>
      calls.filter((c) => c.operation === operation && (status === undefined || c.status === status)).length,
    clearCalls: () => {
      calls.length = 0;
    },
    fault: (fault) => {
      faults.push({ ...fault });
    },
    clearFaults: () => {
      faults = [];
    },
    setRateLimit: (limit) => {
      limited = limit !== undefined;
      if (limit) rateLimit = limit;
      buckets.clear();
    },
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
