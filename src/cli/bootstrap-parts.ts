/**
 * The parts of the bootstrap server, each built from the config by one function: the signing CAs,
 * the serving certificate, the node config reader of kops' answers, the impersonation guard's Node
 * reads and the certificate expiry ledger. src/cli/bootstrap-server.ts assembles them; the server
 * itself (src/bootstrap/server.ts) builds none of them.
 */
import { X509Certificate } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { createSecureContext } from 'node:tls';
import type { KubeConfig, V1CertificateSigningRequest, V1Node } from '@kubernetes/client-node';
import type { Registry } from 'prom-client';
import { CircuitBreaker } from '../bootstrap/circuit-breaker.ts';
import type { DependencyFaultError } from '../bootstrap/dependency.ts';
import type { KopsOptions } from '../bootstrap/kops-handler.ts';
import {
  type GuardReadSource,
  guardPause,
  httpsNodeReader,
  type NodeReader,
  nodePresenceView,
  type PresenceQuestion,
  presenceOf,
  watchedNodeReader,
} from '../bootstrap/node-guard.ts';
import { servingCertificate } from '../bootstrap/server.ts';
import type { Config } from '../config/schema.ts';
import { ConfigError, describeError, NotFoundError } from '../errors.ts';
import type { InformerCache } from '../kube/informer.ts';
import { nodeInformer, type SharedInformer } from '../kube/shared-informer.ts';
import { KubeletRenewalRecorder } from '../ledger/csr-renewals.ts';
import { CertificateExpiryGauge } from '../ledger/expiry-gauge.ts';
import { caKind, servingKind } from '../ledger/ledger.ts';
import { entryOfPem, type LedgerRecorder } from '../ledger/recorder.ts';
import type { ConfigMapLedgerStore } from '../ledger/store.ts';
import { type Logger, RecurringFailureLog } from '../log.ts';
import type { TlsKeyPair } from '../net/hardened-server.ts';
import type { CertificateAuthority } from '../pki/ca.ts';
import { loadCa } from '../pki/folder.ts';
import { type Clock, systemClock } from '../runtime/clock.ts';
import type { LeaderComponent } from '../runtime/controller-runtime.ts';
import { kopsText } from '../statestore/kops-types.ts';
import { openVfs, type VfsOptions } from '../statestore/open.ts';

/** The server section of the config: the bootstrap server runs only with one. */
export type ServerSection = NonNullable<Config['server']>;

/** The CA that signs node certificates, and kops' other signers (found by name). */
export interface SigningAuthorities {
  ca: CertificateAuthority;
  otherSigners: CertificateAuthority[];
}

/** Where `server.caBasePath` points when the config says nothing: where kops mounts the CA files. */
const defaultCaBasePath = '/etc/kubernetes/kops-controller/pki';

/** Where the signing CAs are kept, and a read of them from there. */
export interface SigningAuthoritiesSource {
  /** The folder or state-store URL they are read from (`server.caBasePath`). */
  location: string;
  /** Reads every CA of `server.signingCAs` again, from the store, each time it is called. */
  read(): Promise<SigningAuthorities>;
}

/**
 * The CAs of `server.signingCAs` (default kubernetes-ca) in `server.caBasePath`, in either layout
 * `loadCa` reads (PEM files, or a kops keyset in a state store): the first signs everything, the
 * others only the kops cert names that name them. The store is opened once, so that reading it again
 * (src/cli/ca-watch.ts) reuses its client.
 */
export function signingAuthoritiesSource(
  server: ServerSection,
  vfsOptions: VfsOptions | undefined,
): SigningAuthoritiesSource {
  const [first = 'kubernetes-ca', ...others] = server.signingCAs ?? [];
  const pki = openVfs(server.caBasePath ?? defaultCaBasePath, vfsOptions);
  return {
    location: pki.url,
    read: async () => {
      const ca = await loadCa(pki, first);
      const otherSigners = await Promise.all(others.map((name) => loadCa(pki, name)));
      return { ca, otherSigners };
    },
  };
}

/**
 * The CA that signs node certificates, and kops' other signers. With `given` (tests, `dev`) that CA
 * signs everything; otherwise they are read from `server.caBasePath` ({@link signingAuthoritiesSource}).
 */
export async function signingAuthorities(
  server: ServerSection,
  given: CertificateAuthority | undefined,
  vfsOptions: VfsOptions | undefined,
): Promise<SigningAuthorities> {
  if (given) return { ca: given, otherSigners: [] };
  return signingAuthoritiesSource(server, vfsOptions).read();
}

/**
 * Runs `step` after `firstMs`, then again after each wait it returns, until it returns undefined or
 * the returned function is called. On `clock`'s monotonic timers: a step of the wall clock neither
 * hastens nor delays a run.
 */
export function repeatOnClock(
  clock: Clock,
  step: () => Promise<number | undefined>,
  firstMs: number,
): () => void {
  let stopped = false;
  let cancel = (): void => undefined;
  const run = () =>
    void step().then((ms) => {
      if (!stopped && ms !== undefined) cancel = clock.setTimer(run, ms);
    });
  cancel = clock.setTimer(run, firstMs);
  return () => {
    stopped = true;
    cancel();
  };
}

/** The server's TLS key and certificate, and how to get them again: issued here, or read from their files. */
export interface ServingTls {
  tls: TlsKeyPair;
  reissue?: () => TlsKeyPair;
  reread?: () => Promise<TlsKeyPair>;
}

/**
 * The server's TLS key and certificate: the configured files, or one issued from the cluster CA for
 * `kops-controller.internal.<clusterName>` and `names`.
 */
export async function servingTls(
  config: Config,
  ca: CertificateAuthority,
  names: { dnsNames?: string[]; ipAddresses?: string[] } | undefined,
): Promise<ServingTls> {
  const { serverCertificatePath, serverKeyPath } = config.server ?? {};
  if (serverCertificatePath && serverKeyPath) {
    const reread = async () => ({
      cert: await readFile(serverCertificatePath, 'utf8'),
      key: await readFile(serverKeyPath, 'utf8'),
    });
    try {
      return { tls: await reread(), reread };
    } catch (err) {
      throw new ConfigError(
        `cannot read the server certificate or key (${describeError(err)}); fix server.serverCertificatePath/serverKeyPath`,
        { cause: err },
      );
    }
  }
  const reissue = () =>
    servingCertificate(ca, {
      name: `kops-controller.internal.${config.clusterName}`,
      dnsNames: names?.dnsNames ?? [],
      ipAddresses: names?.ipAddresses ?? [],
    });
  return { tls: reissue(), reissue };
}

/** The share of its lifetime after which a self-issued serving certificate is issued again. */
const servingRenewalFraction = 2 / 3;
/** How long after a failed re-issue the next is tried. */
const servingRetryMs = 10 * 60_000;
/** How often the configured files are read again. */
const servingFilesPollMs = 60_000;

/**
 * Keeps the serving certificate valid while the server runs, handing each new one to `apply`, which
 * serves it. A self-issued one is issued again after two thirds of its lifetime (about every 19
 * days): without this, a server up for four weeks served an expired certificate and every join failed
 * its handshake. Configured files are read again every minute and served once they change and their
 * key matches their certificate (a rotation half written is not). The timers are monotonic, so a step
 * of the wall clock neither hastens nor delays a renewal. Returns what stops it.
 */
export function keepServingTlsCurrent(
  serving: ServingTls,
  apply: (tls: TlsKeyPair) => void,
  options: { clock?: Clock | undefined; logger: Logger },
): () => void {
  const { reissue, reread } = serving;
  const clock = options.clock ?? systemClock;
  const { logger } = options;
  let stopped = false;
  let cancel = (): void => undefined;
  // From the certificate alone: just issued, so its validity is its lifetime (backdate included).
  const renewalDelay = (cert: string) => {
    const { validFromDate, validToDate } = new X509Certificate(cert);
    return servingRenewalFraction * (validToDate.getTime() - validFromDate.getTime());
  };
  if (reissue) {
    cancel = repeatOnClock(
      clock,
      async () => {
        try {
          const tls = reissue();
          apply(tls);
          const delayMs = renewalDelay(tls.cert);
          logger.info({ renewInMs: Math.round(delayMs) }, 'serving certificate issued again');
          return delayMs;
        } catch (err) {
          logger.error(
            { err: describeError(err), retryInMs: servingRetryMs },
            'cannot issue the serving certificate again; the one served expires unless this succeeds',
          );
          return servingRetryMs;
        }
      },
      renewalDelay(serving.tls.cert),
    );
  } else if (reread) {
    let current = serving.tls;
    const failures = new RecurringFailureLog(logger, {
      message: 'cannot serve the server certificate files; still serving the last ones read',
      recoveredMessage: 'server certificate files read again',
    });
    cancel = repeatOnClock(
      clock,
      async () => {
        try {
          const tls = await reread();
          // Closed while the files were read: the server (and the ledger) may be gone.
          if (stopped) return servingFilesPollMs;
          if (tls.cert !== current.cert || tls.key !== current.key) {
            // Throws when the key does not match the certificate: a rotation half written.
            createSecureContext(tls);
            apply(tls);
            current = tls;
            logger.info('server certificate files changed; serving them');
          }
          failures.succeeded();
        } catch (err) {
          failures.failed(err);
        }
        return servingFilesPollMs;
      },
      servingFilesPollMs,
    );
  }
  return () => {
    stopped = true;
    cancel();
  };
}

/**
 * Reads `<configBase>/igconfig/node/<ig>/nodeupconfig.yaml` verbatim, as kops-controller does on
 * every cloud. On metal kops' own controller builds the config from kops' model instead (`kops update
 * cluster` writes no such file there); this one does not, so a missing file on metal says so.
 */
export function nodeConfigReader(
  config: Config,
  vfsOptions: VfsOptions | undefined,
): KopsOptions['nodeConfig'] {
  if (!config.configBase) return undefined;
  const vfs = openVfs(config.configBase, vfsOptions);
  return async (instanceGroup) => {
    const path = `igconfig/node/${instanceGroup}/nodeupconfig.yaml`;
    try {
      // Verbatim, but as text kops wrote: bytes that are not UTF-8 are refused naming the file.
      return { nodeupConfig: kopsText((await vfs.read(path)).data, `${vfs.url}/${path}`) };
    } catch (err) {
      if (!(err instanceof NotFoundError) || config.cloud !== 'metal') throw err;
      throw new NotFoundError(
        `no ${path} in the state store: on metal the Go kops-controller builds a worker's nodeup config ` +
          "from kops' model, which this controller does not; it serves only that file, verbatim " +
          '(see docs/clouds.md, "kops metal workers")',
        { cause: err },
      );
    }
  };
}

/** How the impersonation guard reads Nodes, and the Node watch behind it when there is one. */
export interface NodeGuardReads {
  /** The guard's started view of the Node watch (`nodeGuard: watch` only). */
  guardWatch?: InformerCache<true>;
  /** Reads the API server, always. */
  direct: NodeReader;
  /** What the guard uses: the watch when it is current, the API server otherwise. */
  readNode: NodeReader;
  /** Asked before a request's policies run: the fault when the guard could not judge it now (node-guard.ts guardPause). */
  paused: () => Promise<DependencyFaultError | undefined>;
}

/** The Node watch the impersonation guard answers from (`nodeGuard: watch`). */
export interface GuardWatchSource {
  /** The process's Node watch, not started yet; without it (and `askPrimary`), the guard keeps one of its own. */
  nodes?: SharedInformer<V1Node>;
  /** In a serving worker: asks the primary's watch instead of keeping one. */
  askPrimary?: PresenceQuestion;
  /** The circuit of the reads of the API server (default: one with the breaker's defaults). */
  circuit?: CircuitBreaker;
}

/**
 * How the impersonation guard reads Nodes: with `nodeGuard: watch`, from a view of the process's Node
 * watch (started here and held until the server stops) or, in a serving worker, from the primary's;
 * straight from the API server otherwise.
 */
export function nodeGuardReads(
  config: Config,
  kubeConfig: KubeConfig,
  source: GuardWatchSource,
  onRead: (source: GuardReadSource) => void,
  registry: Registry,
  logger: Logger,
): NodeGuardReads {
  const circuit =
    source.circuit ??
    new CircuitBreaker({ name: "the API server's Node reads (impersonation guard)", logger });
  const direct = httpsNodeReader(kubeConfig, { circuit });
  if (config.bootstrap.nodeGuard !== 'watch')
    return { direct, readNode: direct, paused: guardPause(circuit, undefined, direct) };
  if (source.askPrimary) {
    const { askPrimary } = source;
    return {
      direct,
      readNode: watchedNodeReader(askPrimary, direct, { onRead }),
      paused: guardPause(circuit, askPrimary, direct),
    };
  }
  // Without the process's watch (tests), one of its own, named apart from the process's `nodes`.
  const guardWatch = nodePresenceView(
    source.nodes ?? nodeInformer(kubeConfig, { name: 'nodes-guard', registry, logger }),
  );
  guardWatch.start();
  const presence = presenceOf(guardWatch);
  return {
    guardWatch,
    direct,
    readNode: watchedNodeReader(presence, direct, { onRead }),
    paused: guardPause(circuit, presence, direct),
  };
}

/** What this replica holds, once it serves: every CA it trusts or signs with, and its serving certificate. */
export function holdOwnCertificates(
  ledger: LedgerRecorder,
  authorities: CertificateAuthority[],
  servingCertificatePem: string,
): void {
  const caEntries = authorities.flatMap((authority) =>
    authority.certificates.map((c) => entryOfPem(caKind, `${authority.name}.${c.keypairId}`, c.pem)),
  );
  // Named after the host: the pod's name, or the control-plane node's with host networking.
  ledger.hold([...caEntries, entryOfPem(servingKind, hostname(), servingCertificatePem)]);
}

/** The expiry ledger's leader-only work: its gauge, and the kubelets' renewals recorded. */
export function ledgerComponents(parts: {
  store: ConfigMapLedgerStore;
  ledger: LedgerRecorder;
  /** Reads a Node from the API server (whether one still exists, for the gauge). */
  readNode: NodeReader;
  kubeConfig: KubeConfig;
  /** The process's CSR watch, for the renewal recorder's view. */
  csrs?: SharedInformer<V1CertificateSigningRequest>;
  registry: Registry;
  logger: Logger;
}): LeaderComponent[] {
  const { store, ledger, readNode, kubeConfig, csrs, registry, logger } = parts;
  return [
    new CertificateExpiryGauge({
      store,
      beforeRead: () => ledger.flushDue(),
      nodeExists: async (name) => (await readNode(name)) !== undefined,
      registry,
      logger,
    }),
    new KubeletRenewalRecorder({ kubeConfig, csrs, ledger, registry, logger }),
  ];
}
