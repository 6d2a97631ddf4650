/**
 * The composition root of the bootstrap server: every part the server and its leader-only work need
 * is built here from the config — the approval chain (`bootstrap.policies`, or the kops default for
 * the provider) and its dependencies, the replay guard shared by the replicas, the token store, the
 * CAs, the queue, the impersonation guard, the expiry ledger, the audit trail and the metrics (the
 * cloud calls' included) — and handed, finished, to the server of src/bootstrap/server.ts. Used by
 * `run` and `dev`; every replica serves, only the leader signs. With `workers` above one, the server
 * is served by that many worker processes on one port (src/bootstrap/workers.ts), each built here again
 * from the same config by {@link serveBootstrapWorker}; this process then builds only what signs and
 * leads ({@link startBootstrapPrimary}): what answers requests — the approval chain, the queue, the
 * guard's Node watch — is the workers'.
 *
 * Where a new part plugs in: a dependency of a policy goes into `policyDepsFromConfig`
 * (src/bootstrap/policies/deps.ts); something every request needs goes into the
 * {@link BootstrapContext} built in {@link startBootstrapServer}; leader-only work (a publisher, a
 * cleaner, a signer) joins `components` in {@link startConfiguredBootstrap}.
 */

import {
  CertificatesV1Api,
  CoreV1Api,
  KubeConfig,
  type V1CertificateSigningRequest,
  type V1Node,
} from '@kubernetes/client-node';
import { type Registry, register } from 'prom-client';
import { auditSink } from '../bootstrap/audit.ts';
import { GrpcCallbackChallenger } from '../bootstrap/challenge-caller.ts';
import type { CircuitBreaker } from '../bootstrap/circuit-breaker.ts';
import type { AuditSink, BootstrapContext } from '../bootstrap/context.ts';
import {
  ClusterInfoPublisher,
  clusterInfoHandler,
  configMapClusterInfoSource,
} from '../bootstrap/discovery.ts';
import type { NodeIssueOptions } from '../bootstrap/issue.ts';
import { defaultKopsCertNames } from '../bootstrap/kops-handler.ts';
import { type BootstrapMetrics, bootstrapMetrics, unmarkedRenewalMetric } from '../bootstrap/metrics.ts';
import {
  type NodeReader,
  type PresenceQuestion,
  presenceOf,
  type WatchedPresence,
} from '../bootstrap/node-guard.ts';
import { buildPolicies } from '../bootstrap/policies/build.ts';
import { policyDepsFromConfig } from '../bootstrap/policies/deps.ts';
import { CsrQueue } from '../bootstrap/queue.ts';
import { queueSigner } from '../bootstrap/queue-signer.ts';
import type { RateLimit, RequestLimiter } from '../bootstrap/rate-limit.ts';
import { ConfigMapReplayGuard, ReplayMarkerCollector } from '../bootstrap/replay-guard.ts';
import { loadReservedNames } from '../bootstrap/reserved-names.ts';
import { type BootstrapServer, type RequestHandler, serveBootstrap } from '../bootstrap/server.ts';
import { apiTokenSource, TokenCleaner, TokenValidator, WatchedTokenSecrets } from '../bootstrap/tokens.ts';
import type { BootstrapPolicy } from '../bootstrap/types.ts';
import { type ServingWorkers, startServingWorkers } from '../bootstrap/workers.ts';
import {
  isServingWorker,
  runWorker,
  type WorkerServer,
  type WorkerServices,
} from '../bootstrap/workers-child.ts';
import type { CloudOverrides } from '../cloud/from-config.ts';
import { cloudCallMetrics } from '../cloud/metrics.ts';
import type { Config } from '../config/schema.ts';
import { ConfigError, describeError, type KopsError } from '../errors.ts';
import { reuseConnections } from '../kube/connection-reuse.ts';
import type { SharedInformer } from '../kube/shared-informer.ts';
import { entriesOfIssued, LedgerRecorder } from '../ledger/recorder.ts';
import { ConfigMapLedgerStore } from '../ledger/store.ts';
import { createLogger, type Logger, type LoggerOptions, silentLogger } from '../log.ts';
import { registerLogMetrics } from '../log-metrics.ts';
import type { ConnectionGate, ConnectionLimits, TlsKeyPair } from '../net/hardened-server.ts';
import { bundlePem, type CertificateAuthority, caFromPem } from '../pki/ca.ts';
import { parsePrivateKeyPem, privateKeyPem } from '../pki/keys.ts';
import type { ReservedNames } from '../pki/reserved-names.ts';
import { renderClusterInfoKubeconfig } from '../protocol/cluster-info.ts';
import type { Clock } from '../runtime/clock.ts';
import type { LeaderComponent } from '../runtime/controller-runtime.ts';
import { parseListenAddress } from '../runtime/listen-address.ts';
import { openVfs, type VfsOptions } from '../statestore/open.ts';
import { nodeSecretsReader } from '../statestore/secrets.ts';
import {
  holdOwnCertificates,
  keepServingTlsCurrent,
  ledgerComponents,
  type NodeGuardReads,
  nodeConfigReader,
  nodeGuardReads,
  type ServerSection,
  type ServingTls,
  type SigningAuthorities,
  type SigningAuthoritiesSource,
  servingTls,
  signingAuthorities,
  signingAuthoritiesSource,
} from './bootstrap-parts.ts';
import { watchSigningAuthorities } from './ca-watch.ts';

/** What {@link startBootstrapServer} is given besides the config. */
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
  /** The signing CA and kops' other signers, already loaded (the approval chain needed them first). */
  authorities?: SigningAuthorities;
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
  /** The serving key and certificate, served as given; default: `servingTls` (the configured files, or issued here and renewed). */
  tls?: TlsKeyPair;
  /** The clock of the self-issued serving certificate's renewal (default the system's). */
  clock?: Clock;
  /**
   * In a serving worker: the primary's shared rate limit, connection caps and the shared port, and
   * the question its impersonation guard asks the primary's Node watch.
   */
  shared?: { limiter: RequestLimiter; gate: ConnectionGate; reusePort: true; nodePresence: PresenceQuestion };
  /**
   * The process's Node watch, not started yet, for the impersonation guard's view (`nodeGuard:
   * watch`); without it the server keeps a Node watch of its own (a serving worker, tests).
   */
  nodes?: SharedInformer<V1Node>;
  /** The circuit of the impersonation guard's Node reads (default: one with the breaker's defaults). */
  guardCircuit?: CircuitBreaker;
  /** The process's CSR watch, not started yet, for the expiry ledger's renewal recorder; without it the recorder keeps its own. */
  csrs?: SharedInformer<V1CertificateSigningRequest>;
  registry?: Registry;
  logger?: Logger;
}

/** What signing needs of {@link BootstrapServerDeps}: in this process, and in the primary of serving workers. */
type SigningDeps = Pick<
  BootstrapServerDeps,
  | 'kubeConfig'
  | 'ca'
  | 'authorities'
  | 'apiServer'
  | 'audit'
  | 'vfsOptions'
  | 'csrs'
  | 'clock'
  | 'registry'
  | 'logger'
>;

/**
 * The bootstrap server and the leader-only signer to add to the components, whether it serves in
 * this process or from worker processes.
 */
export interface BootstrapService {
  server: BootstrapServer;
  /** The signing CA and the API server URL the answers name. */
  ca: CertificateAuthority;
  apiServer: string;
  /** Every API server URL, the first being `apiServer`: what discovery publishes. */
  apiServers: string[];
  signer: LeaderComponent;
  /** The certificate expiry ledger's leader-only work: its gauge, and the kubelets' renewals recorded. */
  ledgerComponents: LeaderComponent[];
  /** The expiry ledger's writer (every replica records what it issues). */
  ledger: LedgerRecorder;
  close(): Promise<void>;
}

/** The bootstrap server of `run` served in this process, with its queue. */
export interface RunningBootstrap extends BootstrapService {
  queue: CsrQueue;
  /** What the impersonation guard's Node watch says of a name (absent with `nodeGuard: api`). */
  guardPresence?: (name: string) => WatchedPresence;
}

/** What signs, in every process that signs: the CAs and what a certificate is checked and recorded against. */
interface SigningParts extends SigningAuthorities {
  metrics: BootstrapMetrics;
  /** The pooled kubeconfig every part of the server uses. */
  kubeConfig: KubeConfig;
  certificates: CertificatesV1Api;
  ledgerStore: ConfigMapLedgerStore;
  ledger: LedgerRecorder;
  apiServers: string[];
  reserved: ReservedNames;
  issueOptions: NodeIssueOptions;
}

/** The API server URLs nodes are told to use: the override, `bootstrap.apiServers`, or kops' default. */
function apiServersOf(config: Config, override: string | undefined): string[] {
  if (override) return [override];
  return config.bootstrap.apiServers ?? [`https://api.internal.${config.clusterName}`];
}

/** Builds what the server, its queue and its signer share (it starts nothing). */
async function buildSigningParts(
  config: Config,
  server: ServerSection,
  deps: SigningDeps,
  registry: Registry,
  logger: Logger,
): Promise<SigningParts> {
  const { ca, otherSigners } =
    deps.authorities ?? (await signingAuthorities(server, deps.ca, deps.vfsOptions));
  const metrics = bootstrapMetrics(registry);
  // Requests may read their Node directly: without pooled connections each read would be a TLS handshake.
  const kubeConfig = reuseConnections(deps.kubeConfig);
  // Every certificate signed here, by any path (native, kops, queue), goes into the expiry ledger.
  const ledgerStore = new ConfigMapLedgerStore({
    core: kubeConfig.makeApiClient(CoreV1Api),
    // Its shards over the one HTTPS client: every replica flushes every 2 s during a join storm.
    kubeConfig,
    namespace: config.bootstrap.replayNamespace,
  });
  const ledger = new LedgerRecorder({ store: ledgerStore, logger });
  const apiServers = apiServersOf(config, deps.apiServer);
  // The API server's names and addresses, which no node certificate may carry.
  const reserved = await loadReservedNames(config, {
    apiServers,
    kubeConfig: deps.kubeConfig,
    vfsOptions: deps.vfsOptions,
    logger,
  });
  const issueOptions: NodeIssueOptions = {
    reserved,
    onIssued: (issued, facts) => ledger.record(entriesOfIssued(issued, facts)),
  };
  const certificates = kubeConfig.makeApiClient(CertificatesV1Api);
  return {
    ca,
    otherSigners,
    metrics,
    kubeConfig,
    certificates,
    ledgerStore,
    ledger,
    apiServers,
    reserved,
    issueOptions,
  };
}

/** The CSR-API queue the `queue` verdict uses, started (it lists and watches its CSRs). */
function startQueue(config: Config, parts: SigningParts, registry: Registry, logger: Logger): CsrQueue {
  const queue = new CsrQueue({
    certificates: parts.certificates,
    kubeConfig: parts.kubeConfig,
    ca: parts.ca,
    limits: config.bootstrap.queue,
    reserved: parts.reserved,
    onDepth: parts.metrics.queueDepth,
    onMiss: parts.metrics.queueMiss,
    registry,
    logger,
  });
  queue.start();
  return queue;
}

/**
 * Serves the bootstrap API with its TLS certificate; when it cannot, `stop` ends what was started for
 * it before the error is thrown.
 */
async function serveOrStop(
  config: Config,
  server: ServerSection,
  deps: BootstrapServerDeps,
  serving: { context: BootstrapContext; queue: CsrQueue; parts: SigningParts; registry: Registry },
  stop: () => Promise<unknown>,
): Promise<{ running: BootstrapServer; serving: ServingTls }> {
  const { context, queue, parts, registry } = serving;
  // Calls nodes back on the callback clouds, as `kops-controller.<cluster>`.
  const challenger = new GrpcCallbackChallenger({ ca: parts.ca, clusterName: config.clusterName });
  try {
    const source = deps.tls ? { tls: deps.tls } : await servingTls(config, context.ca, deps.serverNames);
    const running = await serveBootstrap({
      listen: deps.listen ?? server.Listen,
      tls: source.tls,
      context,
      kops: {
        certNames: server.certNames ?? defaultKopsCertNames,
        otherSigners: parts.otherSigners,
        nodeConfig: nodeConfigReader(config, deps.vfsOptions),
        nodeSecrets: config.secretStore
          ? nodeSecretsReader(openVfs(config.secretStore, deps.vfsOptions))
          : undefined,
        challenger,
      },
      native: { challenger },
      clusterInfoHandler: deps.clusterInfoHandler,
      rateLimit: deps.rateLimit,
      ...(deps.shared && {
        limiter: deps.shared.limiter,
        gate: deps.shared.gate,
        reusePort: deps.shared.reusePort,
      }),
      connectionLimits: deps.connectionLimits,
      registry,
      readiness: [() => (queue.hasSynced() ? undefined : 'the CSR queue has not listed yet')],
    });
    return { running, serving: source };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** The leader-only signer of the queue's approved requests. */
function signerOf(
  config: Config,
  deps: SigningDeps,
  parts: SigningParts,
  readNode: NodeReader,
  registry: Registry,
  logger: Logger,
) {
  // No TTL (or 0) is the signer's own default.
  const pendingTtlMs = config.bootstrap.queue.pendingTTL || undefined;
  return queueSigner({
    kubeConfig: parts.kubeConfig,
    certificates: parts.certificates,
    ca: parts.ca,
    readNode,
    // Carries the ledger's onIssued to issueForFacts.
    issueOptions: parts.issueOptions,
    pendingTtlMs,
    audit: deps.audit,
    onIssued: parts.metrics.issued,
    registry,
    logger,
  });
}

/** What {@link bootstrapService} completes: the server serving, and what it was built from. */
interface Served {
  parts: SigningParts;
  guard: NodeGuardReads;
  running: BootstrapServer;
  serving: ServingTls;
  /** What else stops once the server has closed. */
  stop?: () => Promise<unknown>;
  registry: Registry;
  logger: Logger;
}

/**
 * What runs beside the server once it serves: its leader-only work (the signer, the ledger holding
 * this replica's own certificates) and, on every replica, the renewal of its serving certificate;
 * `close` closes the server, then what `stop` stops and the ledger.
 */
async function bootstrapService(
  config: Config,
  deps: SigningDeps,
  served: Served,
): Promise<BootstrapService> {
  const { parts, guard, running, registry, logger } = served;
  const { ca, ledger } = parts;
  const hold = (servingCertificate: string) =>
    holdOwnCertificates(ledger, [ca, ...parts.otherSigners], servingCertificate);
  let stopRenewal = (): void => undefined;
  const close = async () => {
    stopRenewal();
    await running.close();
    await Promise.all([served.stop?.(), ledger.stop()]);
  };
  try {
    hold(served.serving.tls.cert);
    ledger.start();
    stopRenewal = keepServingTlsCurrent(
      served.serving,
      (tls) => {
        running.setSecureContext(tls);
        hold(tls.cert);
      },
      { clock: deps.clock, logger },
    );
    return {
      server: running,
      ca,
      apiServer: parts.apiServers[0] as string,
      apiServers: parts.apiServers,
      ledger,
      signer: signerOf(config, deps, parts, guard.readNode, registry, logger),
      ledgerComponents: ledgerComponents({
        store: parts.ledgerStore,
        ledger,
        readNode: guard.direct,
        kubeConfig: parts.kubeConfig,
        csrs: deps.csrs,
        registry,
        logger,
      }),
      close,
    };
  } catch (err) {
    // A server left listening, or a watch left held, would keep the process alive after the error.
    await close().catch(() => undefined);
    throw err;
  }
}

/** The server section, the registry and the logger every bootstrap server starts from. */
function bootstrapSettings(config: Config, deps: SigningDeps) {
  const server = config.server;
  if (!server) throw new ConfigError('the config has no server section; the bootstrap server needs one');
  const logger = (deps.logger ?? silentLogger).child({ component: 'bootstrap-server' });
  return { server, registry: deps.registry ?? register, logger };
}

/**
 * Starts the bootstrap server for `config.server` in this process (every replica) and builds its
 * leader-only work (the queue signer, the ledger's gauge and renewal recorder), which the caller
 * adds to the components.
 */
export async function startBootstrapServer(
  config: Config,
  deps: BootstrapServerDeps,
): Promise<RunningBootstrap> {
  const { server, registry, logger } = bootstrapSettings(config, deps);
  const parts = await buildSigningParts(config, server, deps, registry, logger);
  const guard = nodeGuardReads(
    config,
    parts.kubeConfig,
    {
      nodes: deps.nodes,
      askPrimary: deps.shared?.nodePresence,
      ...(deps.guardCircuit ? { circuit: deps.guardCircuit } : {}),
    },
    parts.metrics.guardRead,
    registry,
    logger,
  );
  const queue = startQueue(config, parts, registry, logger);
  const context: BootstrapContext = {
    ca: parts.ca,
    policies: deps.policies,
    readNode: guard.readNode,
    guardPaused: guard.paused,
    queue,
    apiServer: parts.apiServers[0] as string,
    issueOptions: parts.issueOptions,
    audit: deps.audit,
    metrics: parts.metrics,
    logger,
  };
  const stopServing = () => Promise.all([queue.stop(), guard.guardWatch?.stop()]);
  const { running, serving } = await serveOrStop(
    config,
    server,
    deps,
    { context, queue, parts, registry },
    stopServing,
  );
  return {
    ...(await bootstrapService(config, deps, {
      parts,
      guard,
      running,
      serving,
      stop: stopServing,
      registry,
      logger,
    })),
    queue,
    guardPresence: guard.guardWatch && presenceOf(guard.guardWatch),
  };
}

/** What {@link startBootstrapPrimary} is given: what signs here, and the workers that serve. */
type BootstrapPrimaryDeps = SigningDeps &
  Pick<BootstrapServerDeps, 'listen' | 'serverNames' | 'rateLimit' | 'connectionLimits' | 'tls' | 'nodes'> & {
    workers: { count: number; spec: BootstrapWorkerSpec };
  };

/**
 * Serves the bootstrap server from worker processes (src/bootstrap/workers.ts) and builds, here, its
 * leader-only work. No request is answered here, so little that only answers requests is built: each
 * worker opens its own watches of the token Secrets and its queue's CSRs (small: one type of Secret,
 * one signer's CSRs). The Node watch is the exception: the impersonation guard's view of it is kept
 * here, and the workers ask it (one Node watch per process, not one per worker); the signer reads
 * Nodes through it too, as in a single process.
 */
async function startBootstrapPrimary(config: Config, deps: BootstrapPrimaryDeps): Promise<BootstrapService> {
  const { server, registry, logger } = bootstrapSettings(config, deps);
  const parts = await buildSigningParts(config, server, deps, registry, logger);
  const serving = deps.tls ? { tls: deps.tls } : await servingTls(config, parts.ca, deps.serverNames);
  const guard = nodeGuardReads(
    config,
    parts.kubeConfig,
    { nodes: deps.nodes },
    parts.metrics.guardRead,
    registry,
    logger,
  );
  const stop = async () => guard.guardWatch?.stop();
  let running: ServingWorkers;
  try {
    running = await startServingWorkers({
      count: deps.workers.count,
      entry: import.meta.url,
      spec: deps.workers.spec,
      tls: serving.tls,
      listen: deps.listen ?? server.Listen,
      limits: deps.connectionLimits,
      rateLimit: deps.rateLimit,
      nodePresence: guard.guardWatch && presenceOf(guard.guardWatch),
      registry,
      logger,
    });
  } catch (err) {
    await stop();
    throw err;
  }
  return await bootstrapService(config, deps, { parts, guard, running, serving, stop, registry, logger });
}

/** What {@link startConfiguredBootstrap} is built from. */
export interface ConfiguredBootstrapOptions {
  config: Config;
  kubeConfig: KubeConfig;
  vfsOptions: VfsOptions;
  /** Cloud endpoints and credentials other than the defaults (the simulator's, in tests and `dev`). */
  cloud?: CloudOverrides;
  /** The process's Node watch, not started yet (`run`'s); the guard adds its view when this process serves. */
  nodes?: SharedInformer<V1Node>;
  /** The process's CSR watch, not started yet (`run`'s), for the expiry ledger's renewal recorder. */
  csrs?: SharedInformer<V1CertificateSigningRequest>;
  registry: Registry;
  logger?: Logger;
  /**
   * The connection caps and worker count (`run`'s flags), and overrides for tests: listen address,
   * serving names, CA, API server URL, cluster-info handler, rate limit; in a serving worker, its
   * certificate and what it shares with the other workers.
   */
  server?: Partial<
    Pick<
      BootstrapServerDeps,
      | 'listen'
      | 'serverNames'
      | 'ca'
      | 'apiServer'
      | 'clusterInfoHandler'
      | 'connectionLimits'
      | 'rateLimit'
      | 'tls'
      | 'clock'
      | 'shared'
    >
  > & {
    /** Worker processes that serve (`run --bootstrap-workers`); 1 (the default) serves in this process. */
    workers?: number;
  };
}

/**
 * What a serving worker builds its server from (sent to it by the primary): the primary's config,
 * kubeconfig and overrides. The serving certificate comes with the worker's services, so that every
 * worker presents the same one, renewed or not.
 */
export interface BootstrapWorkerSpec {
  config: Config;
  /** The primary's kubeconfig, exported. */
  kubeconfig: string;
  /** Without `env`: a worker inherits the primary's environment. */
  vfsOptions: Omit<VfsOptions, 'env'>;
  cloud?: CloudOverrides;
  /** The signing CA given to the primary (tests, `dev`), as PEM; otherwise the worker loads `server.signingCAs`. */
  ca?: { name: string; bundle: string; key: string };
  server: Partial<Pick<BootstrapServerDeps, 'apiServer' | 'connectionLimits' | 'rateLimit'>>;
  log: Pick<LoggerOptions, 'level'>;
}

/** The spec of this process's serving workers; a ConfigError when a part of it cannot be sent to another process. */
function workerSpecOf(options: ConfiguredBootstrapOptions, logger: Logger): BootstrapWorkerSpec {
  const { ca, apiServer, connectionLimits, rateLimit } = options.server ?? {};
  const { env: _env, ...vfsOptions } = options.vfsOptions;
  const spec: BootstrapWorkerSpec = {
    config: options.config,
    kubeconfig: options.kubeConfig.exportConfig(),
    vfsOptions,
    cloud: options.cloud,
    ca: ca && { name: ca.name, bundle: bundlePem(ca), key: privateKeyPem(ca.signer.key) },
    server: { apiServer, connectionLimits, rateLimit },
    log: { level: logger.level as LoggerOptions['level'] },
  };
  try {
    structuredClone(spec);
  } catch (err) {
    throw new ConfigError(
      `the bootstrap workers cannot be given this process's settings (${describeError(err)}); serve with one worker (--bootstrap-workers 1)`,
      { cause: err },
    );
  }
  return spec;
}

/**
 * A serving worker's server (this module is the entry src/bootstrap/workers.ts forks): the primary's bootstrap server
 * rebuilt from `spec`, serving on the shared port with the shared limits. Its leader-only components
 * are not started: they run in the primary.
 */
async function serveBootstrapWorker(spec: unknown, services: WorkerServices): Promise<WorkerServer> {
  const { config, kubeconfig, vfsOptions, cloud, ca, server, log } = spec as BootstrapWorkerSpec;
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromString(kubeconfig);
  // The workers write most of the log: their dropped lines are summed into the primary's scrape.
  registerLogMetrics(services.registry);
  const running = await startConfiguredBootstrap({
    config,
    kubeConfig,
    vfsOptions,
    cloud,
    registry: services.registry,
    // Each worker's records name it: which process served a request, which one died.
    logger: createLogger(log).child({ worker: process.pid }),
    server: {
      ...server,
      listen: services.listen,
      tls: services.tls,
      ca: ca && caFromPem(ca.bundle, parsePrivateKeyPem(ca.key), { name: ca.name }),
      shared: {
        limiter: services.limiter,
        gate: services.gate,
        reusePort: services.reusePort,
        nodePresence: services.nodePresence,
      },
    },
  });
  return {
    address: running.server.address,
    setSecureContext: (tls) => running.server.setSecureContext(tls),
    close: () => running.close(),
  };
}

/** The running server, and the leader-only components that go with it: the queue signer, the cluster-info publisher, the token and replay-marker cleaners, and the certificate expiry ledger's gauge and renewal recorder. */
export interface ConfiguredBootstrap extends BootstrapService {
  components: LeaderComponent[];
  /**
   * Settles, with the error the process is to exit with (`gone`, exit 75), once the CAs this server
   * read from `server.caBasePath` are no longer what is there (src/cli/ca-watch.ts): `run` then shuts
   * down and its restart loads them. Never when the CA was given (tests, `dev`), nor in a serving
   * worker, whose primary watches for it.
   */
  caReplaced: Promise<KopsError>;
}

/** How long the served cluster-info may lag behind the ConfigMap; bounds the API reads a flood causes. */
const clusterInfoCacheMs = 2_000;

/** The address nodes use for this server: the audience GCE identity tokens must name. */
function serverUrlOf(config: Config): string {
  const port = parseListenAddress(config.server?.Listen ?? ':3988').port;
  return `https://kops-controller.internal.${config.clusterName}:${port}`;
}

/**
 * The approval chain of `bootstrap.policies`, built with the dependencies of the configured policies
 * only; `release` closes the cloud clients they hold.
 */
async function approvalChain(
  options: ConfiguredBootstrapOptions,
  shared: {
    core: CoreV1Api;
    tokens: WatchedTokenSecrets;
    replayGuard: ConfigMapReplayGuard;
    ca: CertificateAuthority;
  },
  logger: Logger,
): Promise<{ policies: BootstrapPolicy[]; release(): void }> {
  const { config } = options;
  const sources: Parameters<typeof policyDepsFromConfig>[0] = {
    config,
    core: shared.core,
    kubeConfig: options.kubeConfig,
    ca: shared.ca,
    tokens: new TokenValidator(shared.tokens, logger),
    replayGuard: shared.replayGuard,
    serverUrl: serverUrlOf(config),
    cloud: options.cloud,
    logger,
    cloudCalls: cloudCallMetrics(options.registry),
    countUnmarkedRenewal: unmarkedRenewalMetric(options.registry),
  };
  if (config.configBase) sources.stateStore = openVfs(config.configBase, options.vfsOptions);
  const { deps, close } = await policyDepsFromConfig(sources);
  try {
    return { policies: await buildPolicies(config, deps), release: close };
  } catch (err) {
    close();
    throw err;
  }
}

/**
 * Builds the approval chain and starts the server with it, and the leader-only work that goes with
 * it; `close` also releases the cloud clients and the token watch.
 */
export async function startConfiguredBootstrap(
  options: ConfiguredBootstrapOptions,
): Promise<ConfiguredBootstrap> {
  const { config, kubeConfig, logger = silentLogger } = options;
  if (!config.server)
    throw new ConfigError('the config has no server section; the bootstrap server needs one');
  const { workers = 1, ...serverOverrides } = options.server ?? {};
  const workerPlan = workers > 1 ? { count: workers, spec: workerSpecOf(options, logger) } : undefined;
  const signing = {
    kubeConfig,
    audit: auditSink(logger),
    vfsOptions: options.vfsOptions,
    csrs: options.csrs,
    registry: options.registry,
    logger,
  };
  // The CAs first: the renewal policy checks node certificates against them.
  let caSource: SigningAuthoritiesSource | undefined;
  let authorities: SigningAuthorities;
  if (options.server?.ca) authorities = { ca: options.server.ca, otherSigners: [] };
  else {
    caSource = signingAuthoritiesSource(config.server, options.vfsOptions);
    authorities = await caSource.read();
  }
  const core = kubeConfig.makeApiClient(CoreV1Api);
  // One guard object serves the policies (claims) and the leader's collector (expiry).
  const replayGuard = new ConfigMapReplayGuard({
    core,
    kubeConfig,
    namespace: config.bootstrap.replayNamespace,
  });
  // One watch of the token Secrets: the policies refuse guesses from it (every replica), the
  // leader's signer and cleaner follow its events instead of polling.
  const tokens = new WatchedTokenSecrets({
    kubeConfig,
    api: apiTokenSource(core),
    registry: options.registry,
    logger,
  });
  tokens.start();
  let release = (): void => undefined;
  let running: BootstrapService | undefined;
  try {
    if (workerPlan) {
      // The workers build the approval chain and the cluster-info reads: only they answer requests.
      running = await startBootstrapPrimary(config, {
        ...signing,
        ...serverOverrides,
        authorities,
        nodes: options.nodes,
        workers: workerPlan,
      });
    } else {
      const chain = await approvalChain(options, { core, tokens, replayGuard, ca: authorities.ca }, logger);
      release = chain.release;
      const clusterInfo = configMapClusterInfoSource(core, { maxAgeMs: clusterInfoCacheMs });
      running = await startBootstrapServer(config, {
        ...signing,
        policies: chain.policies,
        clusterInfoHandler: clusterInfoHandler(clusterInfo, logger),
        ...serverOverrides,
        authorities,
        nodes: options.nodes,
      });
    }
    const served = running;
    const publisher = new ClusterInfoPublisher({
      core,
      source: tokens,
      kubeconfig: () =>
        renderClusterInfoKubeconfig({ servers: served.apiServers, caBundlePem: bundlePem(served.ca) }),
      logger,
    });
    const cleaners = [
      new TokenCleaner({ core, source: tokens, logger }),
      new ReplayMarkerCollector({ guard: replayGuard, logger }),
    ];
    let stopWatch = (): void => undefined;
    const caReplaced = new Promise<KopsError>((onReplaced) => {
      // A serving worker loaded the CA itself, but the process that stops and restarts is its primary.
      if (!caSource || serverOverrides.shared) return;
      stopWatch = watchSigningAuthorities({
        loaded: authorities,
        source: caSource,
        onReplaced,
        clock: serverOverrides.clock,
        logger: logger.child({ component: 'bootstrap-server' }),
      });
    });
    return {
      ...served,
      components: [served.signer, publisher, ...cleaners, ...served.ledgerComponents],
      caReplaced,
      async close() {
        stopWatch();
        await served.close();
        release();
        await tokens.stop();
      },
    };
  } catch (err) {
    await running?.close().catch(() => undefined);
    release();
    await tokens.stop();
    throw err;
  }
}

// Forked as a serving worker of `run` (src/bootstrap/workers.ts).
if (import.meta.main && isServingWorker()) runWorker(serveBootstrapWorker);
