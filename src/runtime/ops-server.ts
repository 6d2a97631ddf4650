/**
 * The operations endpoint: `/healthz` (the process serves requests), `/readyz` (every readiness check
 * passes) and `/metrics` (Prometheus exposition of a registry). Check output follows kube-apiserver's
 * style, one `[+]name ok` / `[-]name failed: reason` line per check, so operators read it the same way.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Registry } from 'prom-client';
import { describeError } from '../errors.ts';
import { type Logger, silentLogger } from '../log.ts';
import { type ConnectionLimits, type HardenedServer, startHardenedServer } from '../net/hardened-server.ts';
import { fromThisMachine } from '../net/this-machine.ts';
import { type Clock, systemClock } from './clock.ts';
import { SharedSnapshot } from './shared-snapshot.ts';

/** One named readiness condition; `check` returns undefined when ready, else the reason it is not. */
export interface ReadinessCheck {
  name: string;
  check: () => string | undefined;
}

/** Options of {@link startOpsServer}. */
export interface OpsServerOptions {
  /** Listen address, e.g. ":3987" or "127.0.0.1:0". */
  listen: string;
  registry: Registry;
  /** Read at every `/readyz` request, so checks can be added after start. */
  readinessChecks: () => readonly ReadinessCheck[];
  /** Whether the process is healthy; `/healthz` fails with the returned reason otherwise. */
  liveness?: () => string | undefined;
  /** Which sources are this machine, kept a place beyond the cap (default: loopback and the interfaces' addresses). */
  fromThisMachine?: (source: string) => boolean;
  /** Overrides of {@link opsConnectionLimits} (tests shorten the timeouts). */
  connectionLimits?: Partial<ConnectionLimits>;
  /** Measures how long an exposition is reused (tests pass a fake one). */
  clock?: Pick<Clock, 'monotonic'>;
  /** How long one exposition answers every scrape (default {@link metricsReuseMs}). */
  metricsReuseMs?: number;
  logger?: Logger;
}

/** A running operations server; `url` is e.g. `http://127.0.0.1:3987`. */
export type OpsServer = HardenedServer;

/**
 * The endpoint's callers are the kubelet's probes and Prometheus: a few connections. The default
 * timeouts of the product apply; Node's own (60 s for headers, 5 minutes for a request) do not.
 */
export const opsConnectionLimits: Partial<ConnectionLimits> = {
  maxConnections: 256,
  maxConnectionsPerSource: 32,
};

/**
 * How long one `/metrics` exposition answers every scrape. Anyone who reaches the port may scrape,
 * and with serving workers a build asks each of them over IPC and sums their answers: sharing one
 * build per second bounds that cost, however many callers there are. Prometheus scrapes every
 * 15–60 s, so an exposition up to a second old is as good as a fresh one to it (two Prometheus
 * replicas scraping within the same second read the same numbers).
 */
export const metricsReuseMs = 1_000;

function send(res: ServerResponse, status: number, contentType: string, body: string): void {
  res.writeHead(status, { 'content-type': contentType, 'cache-control': 'no-store' }).end(body);
}

function readiness(checks: readonly ReadinessCheck[]): { ok: boolean; body: string } {
  let ok = true;
  const lines = checks.map(({ name, check }) => {
    let reason: string | undefined;
    try {
      reason = check();
    } catch (err) {
      reason = describeError(err);
    }
    if (reason !== undefined) ok = false;
    return reason === undefined ? `[+]${name} ok` : `[-]${name} failed: ${reason}`;
  });
  lines.push(ok ? 'readyz check passed' : 'readyz check failed');
  return { ok, body: lines.join('\n') + '\n' };
}

/** Starts the operations server; resolves once it listens. */
export async function startOpsServer(options: OpsServerOptions): Promise<OpsServer> {
  const logger = options.logger ?? silentLogger;
  const metrics = new SharedSnapshot(() => options.registry.metrics(), {
    reuseMs: options.metricsReuseMs ?? metricsReuseMs,
    clock: options.clock ?? systemClock,
  });
  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const path = new URL(req.url ?? '/', 'http://localhost').pathname;
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.setHeader('allow', 'GET, HEAD');
      return send(res, 405, 'text/plain; charset=utf-8', 'method not allowed\n');
    }
    switch (path) {
      case '/healthz':
      case '/livez': {
        const reason = options.liveness?.();
        return reason === undefined
          ? send(res, 200, 'text/plain; charset=utf-8', 'ok\n')
          : send(res, 500, 'text/plain; charset=utf-8', `unhealthy: ${reason}\n`);
      }
      case '/readyz': {
        const { ok, body } = readiness(options.readinessChecks());
        return send(res, ok ? 200 : 503, 'text/plain; charset=utf-8', body);
      }
      case '/metrics':
        // HEAD is answered with a scrape's headers (no length: a scrape's is chunked) and builds nothing.
        if (req.method === 'HEAD') return send(res, 200, options.registry.contentType, '');
        return send(res, 200, options.registry.contentType, await metrics.get());
      default:
        return send(res, 404, 'text/plain; charset=utf-8', 'not found: try /healthz, /readyz or /metrics\n');
    }
  };
  return startHardenedServer({
    name: 'operations',
    listen: options.listen,
    listenSetting: 'metrics.listen',
    limits: { ...opsConnectionLimits, ...options.connectionLimits },
    // The kubelet probes a host-network pod from the node's own address: it keeps a place however
    // many remote clients fill the cap.
    reserved: options.fromThisMachine ?? fromThisMachine(),
    handler: (req, res) => {
      handle(req, res).catch((err) => {
        logger.error({ err: describeError(err), url: req.url }, 'operations endpoint failed');
        if (!res.headersSent) send(res, 500, 'text/plain; charset=utf-8', 'internal error\n');
      });
    },
    registry: options.registry,
    logger,
  });
}
