/**
 * A simulated Kubernetes API server over HTTPS on loopback, faithful enough that the production
 * clients (@kubernetes/client-node, kubectl) run against it unchanged. Tests, benchmarks and
 * `kops-controller dev` use it; see docs/simulator.md.
 */
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { KubeConfig } from '@kubernetes/client-node';
import { stringify } from 'yaml';
import { type Logger, silentLogger } from '../../log.ts';
import { createCertificateAuthority, issueServingCertificate, type SimCertificateAuthority } from '../tls.ts';
import { Authenticator, type AuthorizationMode, Authorizer, type GrantRule } from './auth.ts';
import { FaultInjector } from './faults.ts';
import { createRequestHandler, type HandlerContext } from './handler.ts';
import { ApiServerMetrics } from './metrics.ts';
import type { SimUser } from './objects.ts';
import { SimStore } from './store.ts';

// The types and classes callers of startApiServer work with.
export type { GrantRule } from './auth.ts';
export type { ErrorFault, FaultScope } from './faults.ts';
export { FaultInjector } from './faults.ts';
export type { KubeObject, ObjectMeta, SimUser } from './objects.ts';
export type { ChangeEvent, SimStoreOptions, WriteOptions } from './store.ts';
export { SimStore } from './store.ts';

/** How to start a simulated API server; every field is optional. */
export interface StartApiServerOptions {
  /** Address to listen on (default 127.0.0.1). */
  host?: string;
  /** Port (default 0: an ephemeral port). */
  port?: number;
  /** Extra PEM CA certificates whose client certificates authenticate (CN = user, O = groups). */
  clientCAs?: string[];
  /** `rbac-lite` (default) or `allow-all`. */
  authorization?: AuthorizationMode;
  logger?: Logger;
  /**
   * How often watches with allowWatchBookmarks may get a BOOKMARK (default 60 s, as the apiserver);
   * one is sent only when the watch cache of the resource has moved past the watch's start.
   */
  bookmarkIntervalMs?: number;
  /**
   * How often etcd's progress notification moves every watch cache to the current resourceVersion
   * (default 10 minutes, etcd's `--experimental-watch-progress-notify-interval`); 0 turns it off.
   */
  progressNotifyIntervalMs?: number;
  /** How many changes are kept for watch resumption and paging (default 10,000). */
  historyLimit?: number;
}

/** A running simulated API server. */
export interface SimApiServer {
  /** `https://127.0.0.1:PORT`. */
  url: string;
  /** PEM of the CA that signed the serving certificate (and that client certificates may chain to). */
  caCertificate: string;
  /** A kubeconfig (YAML) for a user; default admin {name:'admin', groups:['system:masters']}. Uses a bearer token minted for that user. */
  kubeconfig(user?: SimUser): string;
  /** The same as a loaded @kubernetes/client-node KubeConfig. */
  kubeConfig(user?: SimUser): KubeConfig;
  /** Registers a bearer token for a user (for TokenReview and auth tests). */
  addToken(token: string, user: SimUser): void;
  /** Grants a user or group verbs on resources (rbac-lite). */
  grant(rule: GrantRule): void;
  /** Direct, synchronous access for seeding and inspection; writes behave like API writes. */
  store: SimStore;
  faults: FaultInjector;
  /**
   * How often watches that asked for bookmarks get one, in ms (the `bookmarkIntervalMs` option); a
   * change applies to watches opened after it. For a world started by someone else (`dev`'s cluster)
   * that a benchmark needs to be current sooner than the apiserver's minute.
   */
  bookmarkIntervalMs: number;
  /** The server's CA and its key, for tests that mint client certificates: `issueClientCertificate(sim.certificateAuthority, user)`. */
  certificateAuthority: SimCertificateAuthority;
  /** Closes the listener, open watch streams and connections. */
  close(): Promise<void>;
}

/** The default user of `kubeconfig()`: a cluster admin. */
export const adminUser: SimUser = { name: 'admin', groups: ['system:masters'] };

/** Starts a simulated API server; resolves once it listens. */
export async function startApiServer(options: StartApiServerOptions = {}): Promise<SimApiServer> {
  const logger = options.logger ?? silentLogger;
  const host = options.host ?? '127.0.0.1';
  const ca = await createCertificateAuthority('kops-controller-sim-apiserver-ca');
  const serving = await issueServingCertificate(
    ca,
    host === '127.0.0.1' || host === '::1' || host === 'localhost' ? [] : [host],
  );
  const store = new SimStore(
    options.historyLimit === undefined ? {} : { historyLimit: options.historyLimit },
  );
  const faults = new FaultInjector();
  const authenticator = new Authenticator();
  const authorizer = new Authorizer(options.authorization ?? 'rbac-lite');
  let serverAddress = '';
  const context: HandlerContext = {
    store,
    faults,
    authenticator,
    authorizer,
    logger,
    bookmarkIntervalMs: options.bookmarkIntervalMs ?? 60_000,
    serverAddress: () => serverAddress,
    metrics: new ApiServerMetrics(store),
  };
  const server = createServer(
    {
      key: serving.privateKey,
      cert: serving.certificate,
      ca: [ca.certificate, ...(options.clientCAs ?? [])],
      requestCert: true,
      rejectUnauthorized: false,
    },
    createRequestHandler(context),
  );
  server.on('clientError', (_err, socket) => {
    if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n');
    else socket.destroy();
  });
  server.on('tlsClientError', () => undefined);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const hostPart = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  serverAddress = `${hostPart}:${address.port}`;
  const url = `https://${serverAddress}`;
  logger.info({ url }, 'simulated Kubernetes API server listening');
  const progressEveryMs = options.progressNotifyIntervalMs ?? 600_000;
  const progress =
    progressEveryMs > 0 ? setInterval(() => store.notifyProgress(), progressEveryMs).unref() : undefined;

  const tokens = new Map<string, string>();
  const tokenFor = (user: SimUser): string => {
    const key = JSON.stringify([user.name, [...user.groups].sort()]);
    let token = tokens.get(key);
    if (!token) {
      token = randomBytes(24).toString('base64url');
      tokens.set(key, token);
      authenticator.addToken(token, user);
    }
    return token;
  };
  const kubeconfig = (user: SimUser = adminUser): string =>
    stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [
        {
          name: 'sim',
          cluster: {
            server: url,
            'certificate-authority-data': Buffer.from(ca.certificate).toString('base64'),
          },
        },
      ],
      users: [{ name: user.name, user: { token: tokenFor(user) } }],
      contexts: [{ name: 'sim', context: { cluster: 'sim', user: user.name, namespace: 'default' } }],
      'current-context': 'sim',
    });

  return {
    url,
    caCertificate: ca.certificate,
    certificateAuthority: ca,
    kubeconfig,
    kubeConfig(user?: SimUser): KubeConfig {
      const kc = new KubeConfig();
      kc.loadFromString(kubeconfig(user));
      return kc;
    },
    addToken: (token, user) => authenticator.addToken(token, user),
    grant: (rule) => authorizer.grant(rule),
    store,
    faults,
    get bookmarkIntervalMs() {
      return context.bookmarkIntervalMs;
    },
    set bookmarkIntervalMs(ms: number) {
      context.bookmarkIntervalMs = ms;
    },
    async close(): Promise<void> {
      clearInterval(progress);
      faults.dropWatches();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}
