/**
 * The bootstrap HTTPS server (`server.Listen`, kops' :3988). It runs on every replica, serves
 * `/healthz`, `/readyz`, `/cluster-info` (mounted), the native API (`/v1/...`) and kops' `/bootstrap`,
 * and defends itself: the connection caps, timeouts and TLS policy every server of the product has
 * (src/net/hardened-server.ts), a 64 KiB body limit, a token bucket per source address (429 +
 * Retry-After), JSON errors for every bad input and never a crash. Shutdown is graceful: the
 * listener closes, long-polls are released, in-flight requests get a grace period.
 *
 * It is handed finished parts — the approval chain, the queue, the guard, the CA, the metrics in
 * {@link BootstrapContext} — and builds none itself: src/cli/bootstrap-server.ts assembles them.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Registry } from 'prom-client';
import {
  describeError,
  InvalidInputError,
  KopsError,
  MethodNotAllowedError,
  NotFoundError,
  RateLimitedError,
  UnsupportedMediaTypeError,
} from '../errors.ts';
import type { Logger } from '../log.ts';
import {
  type ConnectionGate,
  type ConnectionLimits,
  type HardenedServer,
  startHardenedServer,
  type TlsKeyPair,
} from '../net/hardened-server.ts';
import { warnIfSessionTicketsOn } from '../net/openssl-config.ts';
import { readBody } from '../net/read-body.ts';
import { sourceAddress, sourceOf } from '../net/source.ts';
import type { CertificateAuthority } from '../pki/ca.ts';
import { generateKey, privateKeyPem } from '../pki/keys.ts';
import { issueCertificate, publicKeyRequest } from '../pki/profiles.ts';
import type { BootstrapContext } from './context.ts';
import { DependencyOutages } from './dependency.ts';
import { maxBodyBytes, sendError, sendJson } from './http.ts';
import { type KopsOptions, kopsBootstrap } from './kops-handler.ts';
import {
  type Answer,
  type CertificatesInput,
  type NativeOptions,
  pollRequest,
  submitCertificates,
} from './native-handler.ts';
import { defaultRateLimit, type RateLimit, type RequestLimiter, SourceRateLimiter } from './rate-limit.ts';

/** A plain node:http handler, e.g. the discovery module's `clusterInfoHandler`. */
export type RequestHandler = (req: IncomingMessage, res: ServerResponse) => void | Promise<void>;

/** Options of {@link serveBootstrap}. */
export interface BootstrapServerOptions {
  /** Listen address, e.g. ":3988" or "127.0.0.1:0". */
  listen: string;
  /** The serving key and certificate chain (PEM). */
  tls: TlsKeyPair;
  context: BootstrapContext;
  /** Mounts kops' `POST /bootstrap` when given. */
  kops?: KopsOptions;
  /** Settings of the native API (the callback challenger). */
  native?: NativeOptions;
  /** Serves `GET /cluster-info` when given. */
  clusterInfoHandler?: RequestHandler;
  rateLimit?: RateLimit;
  /** Decides the rate limit instead of a limiter of this server's own (`rateLimit` is then unused). */
  limiter?: RequestLimiter;
  /** Decides the connection caps instead of this server alone (serving workers share one). */
  gate?: ConnectionGate;
  /** Binds with SO_REUSEPORT (serving workers share the port). */
  reusePort?: boolean;
  /** Extra `/readyz` conditions: each returns undefined when ready, else why not. */
  readiness?: readonly (() => string | undefined)[];
  /** How long in-flight requests may finish after close() (default 5 s, as kops). */
  shutdownGraceMs?: number;
  /** Connection caps and timeouts other than the product's defaults. */
  connectionLimits?: Partial<ConnectionLimits>;
  /** Where the connection metrics go (label `server="bootstrap"`); none without it. */
  registry?: Registry;
}

/** A running bootstrap server: its URL (`https://host:port`), address and open connections. */
export type BootstrapServer = HardenedServer;

function remoteAddressOf(req: IncomingMessage): string {
  return sourceAddress(req.socket.remoteAddress);
}

function sendAnswer(res: ServerResponse, answer: Answer): void {
  if (typeof answer.body === 'string') {
    if (res.headersSent || res.destroyed) return;
    res.writeHead(answer.status, {
      'content-type': 'text/plain; charset=utf-8',
      'cache-control': 'no-store',
      ...answer.headers,
    });
    res.end(answer.body);
    return;
  }
  sendJson(res, answer.status, answer.body, answer.headers);
}

function requireJson(req: IncomingMessage): void {
  const type = (req.headers['content-type'] ?? '').split(';')[0]?.trim().toLowerCase();
  if (type !== 'application/json') {
    throw new UnsupportedMediaTypeError('the body must be JSON: send Content-Type: application/json');
  }
}

/** Starts the server; resolves once it listens. */
export async function serveBootstrap(options: BootstrapServerOptions): Promise<BootstrapServer> {
  const { logger } = options.context;
  const shutdown = new AbortController();
  // The server's own record of its dependencies' outages, unless it was handed one: the waits it
  // tells grow with an outage, and each dependency's warning is written once per window.
  const context: BootstrapContext = {
    ...options.context,
    outages: options.context.outages ?? new DependencyOutages({ logger }),
  };
  const routes: Routes = {
    options: { ...options, context },
    limiter: options.limiter ?? new SourceRateLimiter(options.rateLimit ?? defaultRateLimit),
    shutdown: shutdown.signal,
  };
  const server = await startHardenedServer({
    name: 'bootstrap',
    listen: options.listen,
    listenSetting: 'server.Listen',
    tls: options.tls,
    limits: options.connectionLimits,
    gate: options.gate,
    reusePort: options.reusePort,
    maxHeaderSize: 16 * 1024,
    handler: (req, res) => {
      handle(routes, req, res).catch((err) => answerCrash(logger, res, err));
    },
    registry: options.registry,
    logger,
  });
  logger.info({ url: server.url }, 'bootstrap server listening');
  warnIfSessionTicketsOn(logger);
  return {
    ...server,
    close: () => {
      // Long-polls answer "still pending" at once, so that they do not hold the shutdown.
      shutdown.abort();
      return server.close(options.shutdownGraceMs ?? 5_000);
    },
  };
}

/** What answering a request needs: the server's options, its rate limiter and its shutdown signal. */
interface Routes {
  options: BootstrapServerOptions;
  limiter: RequestLimiter;
  /** Aborted on close(): releases the long-polls. */
  shutdown: AbortSignal;
}

/**
 * One request: health and readiness are answered before the rate limit (probes never spend a
 * source's tokens); everything else is rate-limited, routed, and its failure sent as a JSON error.
 */
async function handle(routes: Routes, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = plainTarget(req.url ?? '');
  if (!url) {
    const error = new InvalidInputError(
      'the request target must be a plain path (no "." or ".." segments, "//", "\\" or fragment), ' +
        'or an absolute https URL of one',
    );
    return sendError(res, error);
  }
  const path = url.pathname;
  if (path === '/healthz') return sendAnswer(res, { status: 200, body: 'ok\n' });
  if (path === '/readyz') return sendAnswer(res, readinessAnswer(routes.options.readiness ?? []));
  // An IPv6 host counts as its /64 (src/net/source.ts).
  const taken = routes.limiter.take(sourceOf(req.socket.remoteAddress));
  // A limiter shared across workers answers later; a local one at once, without a turn of the loop.
  const decision = 'allowed' in taken ? taken : await taken;
  if (!decision.allowed) {
    const retryAfter = String(decision.retryAfterSeconds);
    const error = new RateLimitedError(`too many requests from this address; retry in ${retryAfter} s`);
    return sendError(res, error, { 'retry-after': retryAfter });
  }
  try {
    await route(routes, req, res, url);
  } catch (err) {
    if (!(err instanceof KopsError) || err.kind === 'internal' || err.kind === 'config') {
      routes.options.context.logger.error({ err: describeError(err), path }, 'bootstrap request failed');
    }
    sendError(res, err);
  }
}

/**
 * The request's URL when its target is the path it is routed on, as written: origin-form
 * (`/path?query`) or absolute-form (`https://host/path?query`, which RFC 9112 §3.2.2 has servers
 * accept). A target that only resolves to such a path is refused: dot segments (`/x/../bootstrap`,
 * `/x/%2e%2e/bootstrap`), a `//` or `\` that the URL parser takes for the start of a host
 * (`//x/bootstrap` is `/bootstrap`), a fragment. A proxy, load balancer or filter in front that reads
 * the path as written would take it for one endpoint while this server served another (kops' Go
 * server redirects such paths rather than serving them).
 */
function plainTarget(target: string): URL | undefined {
  let url: URL;
  try {
    url = new URL(target, 'https://bootstrap');
  } catch {
    return undefined;
  }
  const written = target.startsWith('/') ? target : /^https?:\/\/[^/?#\\]*(\/.*)$/i.exec(target)?.[1];
  if (written === undefined || written.includes('#')) return undefined;
  return written.split('?')[0] === url.pathname ? url : undefined;
}

/** `/readyz`: 200, or 503 with every reason an extra readiness condition gives. */
function readinessAnswer(checks: readonly (() => string | undefined)[]): Answer {
  const reasons = checks.map((check) => check()).filter((reason): reason is string => reason !== undefined);
  if (reasons.length > 0) return { status: 503, body: `not ready: ${reasons.join('; ')}\n` };
  return { status: 200, body: 'ok\n' };
}

/** Sends a request to its endpoint; what no endpoint serves is a 404. */
async function route(routes: Routes, req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
  const { context, kops, native, clusterInfoHandler } = routes.options;
  const path = url.pathname;
  if (path === '/v1/certificates') {
    if (req.method !== 'POST') throw new MethodNotAllowedError('POST');
    requireJson(req);
    return sendAnswer(
      res,
      await submitCertificates(context, await certificatesInputOf(req, context), native),
    );
  }
  if (path.startsWith('/v1/requests/')) {
    if (req.method !== 'GET') throw new MethodNotAllowedError('GET');
    return sendAnswer(res, await pollUntilReleased(routes, res, url));
  }
  if (path === '/bootstrap' && kops) {
    // nodeup only ever POSTs. Any other method would be decided and issued like a POST (a HEAD's
    // certificates then answered with no body), as kops' Go server does.
    if (req.method !== 'POST') throw new MethodNotAllowedError('POST');
    return sendAnswer(res, await kopsBootstrap(context, kops, await certificatesInputOf(req, context)));
  }
  if (path === '/cluster-info' && clusterInfoHandler) {
    if (req.method !== 'GET' && req.method !== 'HEAD') throw new MethodNotAllowedError('GET');
    return clusterInfoHandler(req, res);
  }
  throw new NotFoundError(`no such endpoint ${path.slice(0, 100)}; see docs/bootstrap-api.md`);
}

/** Reads a certificate request: its body (at most {@link maxBodyBytes}), proof and source. */
async function certificatesInputOf(
  req: IncomingMessage,
  context: BootstrapContext,
): Promise<CertificatesInput> {
  const body = await readBody(req, maxBodyBytes);
  return {
    body,
    authorization: req.headers.authorization,
    remoteAddress: remoteAddressOf(req),
    receivedAt: context.now?.() ?? new Date(),
  };
}

/** `GET /v1/requests/<id>`: a long-poll that ends when its client goes away or the server closes. */
async function pollUntilReleased(routes: Routes, res: ServerResponse, url: URL): Promise<Answer> {
  const poll = new AbortController();
  const abort = () => poll.abort();
  res.once('close', abort);
  // The client's end of sending: with half-open connections allowed (src/net/hardened-server.ts) a
  // client that hangs up no longer closes the answer, so the wait ends here, answered with the state
  // as it is (a client that only half-closed reads it), instead of holding its place until `wait`.
  const socket = res.socket;
  socket?.once('end', abort);
  routes.shutdown.addEventListener('abort', abort, { once: true });
  try {
    // Not percent-decoded: a valid handle has nothing to decode, and a malformed escape is just a bad id.
    const id = url.pathname.slice('/v1/requests/'.length);
    return await pollRequest(
      routes.options.context,
      id,
      url.searchParams.get('wait'),
      poll.signal,
      sourceOf(res.req.socket.remoteAddress),
    );
  } finally {
    socket?.off('end', abort);
    routes.shutdown.removeEventListener('abort', abort);
  }
}

/** A handler that threw past its own error handling: logged, and answered if nothing was sent yet. */
function answerCrash(logger: Logger, res: ServerResponse, err: unknown): void {
  logger.error({ err: describeError(err) }, 'bootstrap handler crashed');
  if (!res.headersSent) sendError(res, err);
  else res.destroy();
}

/** Issues the server's own certificate from the cluster CA (profile `kops-controller`), with a fresh key. */
export function servingCertificate(
  ca: CertificateAuthority,
  names: { name: string; dnsNames?: string[]; ipAddresses?: string[] },
): { key: string; cert: string } {
  const key = generateKey('ecdsa-p256');
  const issued = issueCertificate(ca, 'kops-controller', publicKeyRequest(key), names);
  return { key: privateKeyPem(key), cert: issued.pem + ca.signer.certificate.pem };
}
