/**
 * The bootstrap server a controller config asks for (`server` section), with everything it needs
 * built from the config: the approval chain (`bootstrap.policies`, or the kops default for the
 * provider) and its dependencies, the replay guard shared by the replicas, the token store, the
 * audit trail and the metrics (the cloud calls' included). Used by `run`; every replica serves,
 * only the leader signs.
 */
import { CoreV1Api, type KubeConfig } from '@kubernetes/client-node';
import type { Registry } from 'prom-client';
import { auditSink } from '../bootstrap/audit.ts';
import {
  ClusterInfoPublisher,
  clusterInfoHandler,
  configMapClusterInfoSource,
} from '../bootstrap/discovery.ts';
import { buildPolicies } from '../bootstrap/policies/build.ts';
import { policyDepsFromConfig } from '../bootstrap/policies/deps.ts';
import { ConfigMapReplayGuard, ReplayMarkerCollector } from '../bootstrap/replay-guard.ts';
import {
  type BootstrapServerDeps,
  type RunningBootstrap,
  startBootstrapServer,
} from '../bootstrap/server.ts';
import { apiTokenSource, TokenCleaner, TokenValidator, WatchedTokenSecrets } from '../bootstrap/tokens.ts';
import type { CloudOverrides } from '../cloud/from-config.ts';
import { cloudCallMetrics } from '../cloud/metrics.ts';
import type { Config } from '../config/schema.ts';
import { type Logger, silentLogger } from '../log.ts';
import { bundlePem } from '../pki/ca.ts';
import { renderClusterInfoKubeconfig } from '../protocol/cluster-info.ts';
import type { LeaderComponent } from '../runtime/controller-runtime.ts';
import { parseListenAddress } from '../runtime/listen-address.ts';
import { openVfs, type VfsOptions } from '../statestore/open.ts';

/** What {@link startConfiguredBootstrap} is built from. */
export interface ConfiguredBootstrapOptions {
  config: Config;
  kubeConfig: KubeConfig;
  vfsOptions: VfsOptions;
  /** Cloud endpoints and credentials other than the defaults (the simulator's, in tests and `dev`). */
  cloud?: CloudOverrides;
  registry: Registry;
  logger?: Logger;
  /**
   * The connection caps (`run`'s flags), and overrides for tests: listen address, serving names, CA,
   * API server URL, cluster-info handler.
   */
  server?: Partial<
    Pick<
      BootstrapServerDeps,
      'listen' | 'serverNames' | 'ca' | 'apiServer' | 'clusterInfoHandler' | 'connectionLimits'
    >
  >;
}

/** The running server, and the leader-only components that go with it: the queue signer, the cluster-info publisher, the token and replay-marker cleaners, and the certificate expiry ledger's gauge and renewal recorder. */
export interface ConfiguredBootstrap extends RunningBootstrap {
  components: LeaderComponent[];
}

/** How long the served cluster-info may lag behind the ConfigMap; bounds the API reads a flood causes. */
const clusterInfoCacheMs = 2_000;

/** Builds the dependencies of the configured policies only, then starts the server; `close` also releases the cloud clients. */
export async function startConfiguredBootstrap(
  options: ConfiguredBootstrapOptions,
): Promise<ConfiguredBootstrap> {
  const { config, kubeConfig, logger = silentLogger } = options;
  const core = kubeConfig.makeApiClient(CoreV1Api);
  // One guard object serves the policies (claims) and the leader's collector (expiry).
  const replayGuard = new ConfigMapReplayGuard({ core, namespace: config.bootstrap.replayNamespace });
  // One watch of the token Secrets: the policies refuse guesses from it (every replica), the
  // leader's signer and cleaner follow its events instead of polling.
  const tokens = new WatchedTokenSecrets({
    kubeConfig,
    api: apiTokenSource(core),
    registry: options.registry,
    logger,
  });
  tokens.start();
  const { deps, close: release } = await policyDepsFromConfig({
    config,
    core,
    tokens: new TokenValidator(tokens, logger),
    replayGuard,
    ...(config.configBase ? { stateStore: openVfs(config.configBase, options.vfsOptions) } : {}),
    ...(options.cloud ? { cloud: options.cloud } : {}),
    // The audience GCE identity tokens must name: the address nodes use for this server.
    serverUrl: `https://kops-controller.internal.${config.clusterName}:${parseListenAddress(config.server?.Listen ?? ':3988').port}`,
    logger,
    cloudCalls: cloudCallMetrics(options.registry),
  });
  try {
    const running = await startBootstrapServer(config, {
      kubeConfig,
      policies: await buildPolicies(config, deps),
      audit: auditSink(logger),
      vfsOptions: options.vfsOptions,
      registry: options.registry,
      logger,
      clusterInfoHandler: clusterInfoHandler(
        configMapClusterInfoSource(core, { maxAgeMs: clusterInfoCacheMs }),
        logger,
      ),
      ...options.server,
    });
    const publisher = new ClusterInfoPublisher({
      core,
      source: tokens,
      kubeconfig: () =>
        renderClusterInfoKubeconfig({ servers: running.apiServers, caBundlePem: bundlePem(running.ca) }),
      logger,
    });
    return {
      ...running,
      components: [
        running.signer,
        publisher,
        new TokenCleaner({ core, source: tokens, logger }),
        new ReplayMarkerCollector({ guard: replayGuard, logger }),
        ...running.ledgerComponents,
      ],
      async close() {
        await running.close();
        release();
        await tokens.stop();
      },
    };
  } catch (err) {
    release();
    await tokens.stop();
    throw err;
  }
}
