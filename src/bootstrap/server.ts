/**
 * The bootstrap HTTPS server (`server.Listen`, kops' :3988). It runs on every replica, serves
 * `/healthz`, `/readyz`, `/cluster-info` (mounted), the native API (`/v1/...`) and kops' `/bootstrap`,
 * and defends itself: the connection caps, timeouts and TLS policy every server of the product has
 * (src/net/hardened-server.ts), a 64 KiB body limit, a token bucket per source address (429 +
 * Retry-After), JSON errors for every bad input and never a crash. Shutdown is graceful: the
 * listener closes, long-polls are released, in-flight requests get a grace period.
 */
import { readFile } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { hostname } from 'node:os';
import { CertificatesV1Api, CoreV1Api, type KubeConfig } from '@kubernetes/client-node';
import { type Registry, register } from 'prom-client';
import type { Config } from '../config/schema.ts';
import {
  ConfigError,
  describeError,
  InvalidInputError,
  KopsError,
  NotFoundError,
  RateLimitedError,
} from '../errors.ts';
import { reuseConnections } from '../kube/connection-reuse.ts';
import { KubeletRenewalRecorder } from '../ledger/csr-renewals.ts';
import { CertificateExpiryGauge } from '../ledger/expiry-gauge.ts';
import { caKind, servingKind } from '../ledger/ledger.ts';
import { entriesOfIssued, entryOfPem, LedgerRecorder } from '../ledger/recorder.ts';
import { ConfigMapLedgerStore } from '../ledger/store.ts';
import { type Logger, silentLogger } from '../log.ts';
import {
  type ConnectionLimits,
  type HardenedServer,
  sourceAddress,
  startHardenedServer,
} from '../net/hardened-server.ts';
import { warnIfSessionTicketsOn } from '../net/openssl-config.ts';
import { readBody } from '../net/read-body.ts';
import type { CertificateAuthority } from '../pki/ca.ts';
import { loadCa } from '../pki/folder.ts';
import { generateKey, privateKeyPem } from '../pki/keys.ts';
import { issueCertificate, publicKeyRequest } from '../pki/profiles.ts';
import type { LeaderComponent } from '../runtime/controller-runtime.ts';
import { openVfs, type VfsOptions } from '../statestore/open.ts';
import type { AuditSink, BootstrapContext } from './context.ts';
import { maxBodyBytes, sendError, sendJson } from './http.ts';
import type { NodeIssueOptions } from './issue.ts';
import { defaultKopsCertNames, type KopsOptions, kopsBootstrap } from './kops-handler.ts';
import { bootstrapMetrics } from './metrics.ts';
import { type Answer, type CertificatesInput, pollRequest, submitCertificates } from './native-handler.ts';
import {
  type GuardReadSource,
  httpsNodeReader,
  type NodePresence,
  type NodeReader,
  nodePresenceInformer,
  watchedNodeReader,
  watchIsCurrent,
} from './node-guard.ts';
import { CsrQueue } from './queue.ts';
import { queueSigner } from './queue-signer.ts';
import { defaultRateLimit, type RateLimit, SourceRateLimiter } from './rate-limit.ts';
import { loadReservedNames } from './reserved-names.ts';
import type { BootstrapPolicy } from './types.ts';

/** A plain node:http handler, e.g. the discovery module's `clusterInfoHandler`. */
export type RequestHandler = (req: IncomingMessage, res: ServerResponse) => void | Promise<void>;

/** Options of {@link serveBootstrap}. */
export interface BootstrapServerOptions {
  /** Listen address, e.g. ":3988" or "127.0.0.1:0". */
  listen: string;
  /** The serving key and certificate chain (PEM). */
  tls: { key: string; cert: string };
  context: BootstrapContext;
  /** Mounts kops' `POST /bootstrap` when given. */
  kops?: KopsOptions;
  /** Serves `GET /cluster-info` when given. */
  clusterInfoHandler?: RequestHandler;
  rateLimit?: RateLimit;
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
    throw new KopsError('invalid', 'the body must be JSON: send Content-Type: application/json', {
      details: { reason: 'unsupported-media-type', httpStatus: 415 },
    });
  }
}

function methodNotAllowed(allowed: string): KopsError {
  return new InvalidInputError(`method not allowed here; use ${allowed}`, {
    details: { reason: 'method-not-allowed', httpStatus: 405, allow: allowed },
  });
}

/** Starts the server; resolves once it listens. */
export async function serveBootstrap(options: BootstrapServerOptions): Promise<BootstrapServer> {
  const { logger } = options.context;
  const shutdown = new AbortController();
  const routes: Routes = {
    options,
    limiter: new SourceRateLimiter(options.rateLimit ?? defaultRateLimit),
    shutdown: shutdown.signal,
  };
  const server = await startHardenedServer({
    name: 'bootstrap',
    listen: options.listen,
    listenSetting: 'server.Listen',
    tls: options.tls,
    limits: options.connectionLimits,
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
  limiter: SourceRateLimiter;
  /** Aborted on close(): releases the long-polls. */
  shutdown: AbortSignal;
}

/**
 * One request: health and readiness are answered before the rate limit (probes never spend a
 * source's tokens); everything else is rate-limited, routed, and its failure sent as a JSON error.
 */
async function handle(routes: Routes, req: IncomingMessage, res: ServerResponse): Promise<void> {
  let url: URL;
  try {
    url = new URL(req.url ?? '/', 'https://bootstrap');
  } catch {
    return sendError(res, new InvalidInputError('malformed request URL'));
  }
  const path = url.pathname;
  if (path === '/healthz') return sendAnswer(res, { status: 200, body: 'ok\n' });
  if (path === '/readyz') return sendAnswer(res, readinessAnswer(routes.options.readiness ?? []));
  const decision = routes.limiter.take(remoteAddressOf(req));
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

/** `/readyz`: 200, or 503 with every reason an extra readiness condition gives. */
function readinessAnswer(checks: readonly (() => string | undefined)[]): Answer {
  const reasons = checks.map((check) => check()).filter((reason): reason is string => reason !== undefined);
  if (reasons.length > 0) return { status: 503, body: `not ready: ${reasons.join('; ')}\n` };
  return { status: 200, body: 'ok\n' };
}

/** Sends a request to its endpoint; what no endpoint serves is a 404. */
async function route(routes: Routes, req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
  const { context, kops, clusterInfoHandler } = routes.options;
  const path = url.pathname;
  if (path === '/v1/certificates') {
    if (req.method !== 'POST') throw methodNotAllowed('POST');
    requireJson(req);
    return sendAnswer(res, await submitCertificates(context, await certificatesInputOf(req, context)));
  }
  if (path.startsWith('/v1/requests/')) {
    if (req.method !== 'GET') throw methodNotAllowed('GET');
    return sendAnswer(res, await pollUntilReleased(routes, res, url));
  }
  if (path === '/bootstrap' && kops) {
    return sendAnswer(res, await kopsBootstrap(context, kops, await certificatesInputOf(req, context)));
  }
  if (path === '/cluster-info' && clusterInfoHandler) {
    if (req.method !== 'GET' && req.method !== 'HEAD') throw methodNotAllowed('GET');
    return clusterInfoHandler(req, res);
  }
  throw new NotFoundError(`no such endpoint ${path.slice(0, 100)}; see docs/bootstrap-api.md`, {
    details: { reason: 'not-found' },
  });
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
  routes.shutdown.addEventListener('abort', abort, { once: true });
  try {
    // Not percent-decoded: a valid handle has nothing to decode, and a malformed escape is just a bad id.
    const id = url.pathname.slice('/v1/requests/'.length);
    return await pollRequest(routes.options.context, id, url.searchParams.get('wait'), poll.signal);
  } finally {
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

/** What `run` gives {@link startBootstrapServer} besides the config. */
export interface BootstrapServerDeps {
  kubeConfig: KubeConfig;
  /** The approval chain (`buildPolicies(config, deps)` of src/bootstrap/policies). */
  policies: readonly BootstrapPolicy[];
  /**
   * The signing CA. When absent, every CA of `server.signingCAs` (default kubernetes-ca) is loaded
   * from `server.caBasePath`: the first signs everything, the others only kops cert names that name
   * them.
   */
  ca?: CertificateAuthority;
  /** The API server URL handed to nodes; default `https://api.internal.<clusterName>`, as kops. */
  apiServer?: string;
  /** Overrides `server.Listen` (tests bind 127.0.0.1:0). */
  listen?: string;
  /** Names of the generated serving certificate, when no serverCertificatePath is configured. */
  serverNames?: { dnsNames?: string[]; ipAddresses?: string[] };
  audit?: AuditSink;
  clusterInfoHandler?: RequestHandler;
  vfsOptions?: VfsOptions;
  rateLimit?: RateLimit;
  /** Connection caps and timeouts other than the product's defaults (`run --bootstrap-max-connections…`). */
  connectionLimits?: Partial<ConnectionLimits>;
  registry?: Registry;
  logger?: Logger;
}

/** The bootstrap server of `run`, its queue, and the leader-only signer to add to the components. */
export interface RunningBootstrap {
  server: BootstrapServer;
  /** The signing CA and the API server URL the answers name. */
  ca: CertificateAuthority;
  apiServer: string;
  /** Every API server URL, the first being `apiServer`: what discovery publishes. */
  apiServers: string[];
  queue: CsrQueue;
  signer: LeaderComponent;
  /** The certificate expiry ledger's leader-only work: its gauge, and the kubelets' renewals recorded. */
  ledgerComponents: LeaderComponent[];
  /** The expiry ledger's writer (every replica records what it issues). */
  ledger: LedgerRecorder;
  /** The impersonation guard's Node watch (absent with `nodeGuard: api`): whether it is current, what it knows. */
  guardWatch?: { isCurrent(): boolean; knows(nodeName: string): boolean };
  close(): Promise<void>;
}

async function tlsFor(config: Config, ca: CertificateAuthority, deps: BootstrapServerDeps) {
  const { serverCertificatePath, serverKeyPath } = config.server ?? {};
  if (serverCertificatePath && serverKeyPath) {
    try {
      return {
        cert: await readFile(serverCertificatePath, 'utf8'),
        key: await readFile(serverKeyPath, 'utf8'),
      };
    } catch (err) {
      throw new ConfigError(
        `cannot read the server certificate or key (${describeError(err)}); fix server.serverCertificatePath/serverKeyPath`,
        { cause: err },
      );
    }
  }
  return servingCertificate(ca, {
    name: `kops-controller.internal.${config.clusterName}`,
    dnsNames: deps.serverNames?.dnsNames ?? [],
    ipAddresses: deps.serverNames?.ipAddresses ?? [],
  });
}

/** Reads `<configBase>/igconfig/node/<ig>/nodeupconfig.yaml` verbatim, as kops-controller does. */
function nodeConfigReader(config: Config, vfsOptions: VfsOptions | undefined): KopsOptions['nodeConfig'] {
  if (!config.configBase) return undefined;
  const vfs = openVfs(config.configBase, vfsOptions);
  return async (instanceGroup) => ({
    nodeupConfig: (await vfs.read(`igconfig/node/${instanceGroup}/nodeupconfig.yaml`)).data.toString('utf8'),
  });
}

/** The CA that signs node certificates, and kops' other signers (none when `deps.ca` is given). */
async function signingAuthorities(
  server: NonNullable<Config['server']>,
  deps: BootstrapServerDeps,
): Promise<{ ca: CertificateAuthority; otherSigners: CertificateAuthority[] }> {
  const [first = 'kubernetes-ca', ...others] = server.signingCAs ?? [];
  const pki = openVfs(server.caBasePath ?? '/etc/kubernetes/kops-controller/pki', deps.vfsOptions);
  const ca = deps.ca ?? (await loadCa(pki, first));
  // kops' other signers (etcd-clients-ca-cilium) sign only the kops cert names that name them.
  const otherSigners = deps.ca ? [] : await Promise.all(others.map((name) => loadCa(pki, name)));
  return { ca, otherSigners };
}

/**
 * How the impersonation guard reads Nodes: through a started Node watch with `nodeGuard: watch`,
 * straight from the API server otherwise; `direct` always reads the API server.
 */
function nodeGuard(
  config: Config,
  kubeConfig: KubeConfig,
  onRead: (source: GuardReadSource) => void,
  registry: Registry,
  logger: Logger,
) {
  const guardWatch =
    config.bootstrap.nodeGuard === 'watch'
      ? nodePresenceInformer(kubeConfig, { registry, logger })
      : undefined;
  guardWatch?.start();
  const direct = httpsNodeReader(kubeConfig);
  const readNode = guardWatch ? watchedNodeReader(guardWatch, direct, { onRead }) : direct;
  return { guardWatch, direct, readNode };
}

/** What this replica holds, once it serves: every CA it trusts or signs with, and its serving certificate. */
function holdOwnCertificates(
  ledger: LedgerRecorder,
  authorities: CertificateAuthority[],
  servingCertificatePem: string,
): void {
  ledger.hold([
    ...authorities.flatMap((authority) =>
      authority.certificates.map((c) => entryOfPem(caKind, `${authority.name}.${c.keypairId}`, c.pem)),
    ),
    // Named after the host: the pod's name, or the control-plane node's with host networking.
    entryOfPem(servingKind, hostname(), servingCertificatePem),
  ]);
}

/**
 * Serves the bootstrap API with its TLS certificate; when it cannot, `stop` ends what was started for
 * it before the error is thrown.
 */
async function serveOrStop(
  config: Config,
  deps: BootstrapServerDeps,
  serving: {
    server: NonNullable<Config['server']>;
    context: BootstrapContext;
    queue: CsrQueue;
    otherSigners: CertificateAuthority[];
    registry: Registry;
  },
  stop: () => Promise<unknown>,
): Promise<{ running: BootstrapServer; tls: { cert: string; key: string } }> {
  const { server, context, queue, otherSigners, registry } = serving;
  try {
    const tls = await tlsFor(config, context.ca, deps);
    const running = await serveBootstrap({
      listen: deps.listen ?? server.Listen,
      tls,
      context,
      kops: {
        certNames: server.certNames ?? defaultKopsCertNames,
        otherSigners,
        nodeConfig: nodeConfigReader(config, deps.vfsOptions),
      },
      clusterInfoHandler: deps.clusterInfoHandler,
      rateLimit: deps.rateLimit,
      connectionLimits: deps.connectionLimits,
      registry,
      readiness: [() => (queue.hasSynced() ? undefined : 'the CSR queue has not listed yet')],
    });
    return { running, tls };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** The expiry ledger's leader-only work: its gauge, and the kubelets' renewals recorded. */
function ledgerComponents(parts: {
  store: ConfigMapLedgerStore;
  ledger: LedgerRecorder;
  /** Reads a Node from the API server (whether one still exists, for the gauge). */
  readNode: NodeReader;
  kubeConfig: KubeConfig;
  registry: Registry;
  logger: Logger;
}): LeaderComponent[] {
  const { store, ledger, readNode, kubeConfig, registry, logger } = parts;
  return [
    new CertificateExpiryGauge({
      store,
      beforeRead: () => ledger.flush(),
      nodeExists: async (name) => (await readNode(name)) !== undefined,
      registry,
      logger,
    }),
    new KubeletRenewalRecorder({ kubeConfig, ledger, registry, logger }),
  ];
}

/**
 * Starts the bootstrap server for `config.server` (every replica) and builds the queue signer (the
 * caller adds it to the leader-only components).
 */
export async function startBootstrapServer(
  config: Config,
  deps: BootstrapServerDeps,
): Promise<RunningBootstrap> {
  const server = config.server;
  if (!server) throw new ConfigError('the config has no server section; the bootstrap server needs one');
  const logger = (deps.logger ?? silentLogger).child({ component: 'bootstrap-server' });
  const registry = deps.registry ?? register;
  const { ca, otherSigners } = await signingAuthorities(server, deps);
  const metrics = bootstrapMetrics(registry);
  // Requests may read their Node directly: without pooled connections each read would be a TLS handshake.
  const kubeConfig = reuseConnections(deps.kubeConfig);
  const certificates = kubeConfig.makeApiClient(CertificatesV1Api);
  // Every certificate signed here, by any path (native, kops, queue), goes into the expiry ledger.
  const ledgerStore = new ConfigMapLedgerStore({
    core: kubeConfig.makeApiClient(CoreV1Api),
    namespace: config.bootstrap.replayNamespace,
  });
  const ledger = new LedgerRecorder({ store: ledgerStore, logger });
  const { guardWatch, direct, readNode } = nodeGuard(config, kubeConfig, metrics.guardRead, registry, logger);
  const apiServers = deps.apiServer
    ? [deps.apiServer]
    : (config.bootstrap.apiServers ?? [`https://api.internal.${config.clusterName}`]);
  // The API server's names and addresses, which no node certificate may carry.
  const reserved = await loadReservedNames(config, {
    apiServers,
    kubeConfig: deps.kubeConfig,
    ...(deps.vfsOptions ? { vfsOptions: deps.vfsOptions } : {}),
    logger,
  });
  const queue = new CsrQueue({
    certificates,
    kubeConfig,
    ca,
    limits: config.bootstrap.queue,
    reserved,
    onDepth: metrics.queueDepth,
    registry,
    logger,
  });
  queue.start();
  const issueOptions: NodeIssueOptions = {
    reserved,
    onIssued: (issued, facts) => ledger.record(entriesOfIssued(issued, facts)),
  };
  const context: BootstrapContext = {
    ca,
    policies: deps.policies,
    readNode,
    queue,
    apiServer: apiServers[0] as string,
    issueOptions,
    audit: deps.audit,
    metrics,
    logger,
  };
  const serving = { server, context, queue, otherSigners, registry };
  const { running, tls } = await serveOrStop(config, deps, serving, () =>
    Promise.all([queue.stop(), guardWatch?.stop()]),
  );
  holdOwnCertificates(ledger, [ca, ...otherSigners], tls.cert);
  ledger.start();
  const signer = queueSigner({
    kubeConfig,
    certificates,
    ca,
    readNode,
    // Carries the ledger's onIssued to issueForFacts.
    issueOptions,
    ...(config.bootstrap.queue.pendingTTL ? { pendingTtlMs: config.bootstrap.queue.pendingTTL } : {}),
    audit: deps.audit,
    onIssued: metrics.issued,
    registry,
    logger,
  });
  return {
    server: running,
    ca,
    apiServer: context.apiServer,
    apiServers,
    queue,
    signer,
    ledgerComponents: ledgerComponents({
      store: ledgerStore,
      ledger,
      readNode: direct,
      kubeConfig,
      registry,
      logger,
    }),
    ledger,
    ...(guardWatch ? { guardWatch: guardWatchView(guardWatch) } : {}),
    async close() {
      await running.close();
      await Promise.all([queue.stop(), guardWatch?.stop(), ledger.stop()]);
    },
  };
}

/** What the rest of `run` may ask the guard's Node watch. */
function guardWatchView(nodes: NodePresence): NonNullable<RunningBootstrap['guardWatch']> {
  return {
    isCurrent: () => watchIsCurrent(nodes),
    knows: (nodeName: string) => nodes.get(nodeName) !== undefined,
  };
}
