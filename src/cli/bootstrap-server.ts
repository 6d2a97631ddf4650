/**
 * The bootstrap server a controller config asks for (`server` section), with everything it needs
 * built from the config: the approval chain (`bootstrap.policies`, or the kops default for the
 * provider) and its dependencies, the replay guard shared by the replicas, the token store, the
 * audit trail and the metrics. Used by `run`; every replica serves, only the leader signs.
 */
import { CoreV1Api, type KubeConfig } from '@kubernetes/client-node';
import type { Registry } from 'prom-client';
import { auditSink } from '../bootstrap/audit.ts';
import {
  type ClusterInfoDocument,
  ClusterInfoPublisher,
  type ClusterInfoSource,
  clusterInfoHandler,
  clusterInfoName,
  clusterInfoNamespace,
  renderClusterInfoKubeconfig,
} from '../bootstrap/discovery.ts';
import { awsAccountOf, buildPolicies, type PolicyDeps, policySpecsOf } from '../bootstrap/policies/build.ts';
import { ConfigMapReplayGuard } from '../bootstrap/replay-guard.ts';
import {
  type BootstrapServerDeps,
  type RunningBootstrap,
  startBootstrapServer,
} from '../bootstrap/server.ts';
import { apiTokenSource, TokenValidator } from '../bootstrap/tokens.ts';
import { createAwsProvider } from '../cloud/aws/provider.ts';
import type { CloudOverrides } from '../cloud/from-config.ts';
import { createGceProvider } from '../cloud/gce/provider.ts';
import { InventoryStore } from '../cloud/metal/inventory.ts';
import type { Config } from '../config/schema.ts';
import { fromApiException, httpStatusOfApiError } from '../kube/api-errors.ts';
import { type Logger, silentLogger } from '../log.ts';
import { bundlePem } from '../pki/ca.ts';
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
  /** Overrides for tests: listen address, serving names, CA, API server URL, cluster-info handler. */
  server?: Partial<
    Pick<BootstrapServerDeps, 'listen' | 'serverNames' | 'ca' | 'apiServer' | 'clusterInfoHandler'>
  >;
}

/** The running server, and the leader-only components that go with it: the queue signer and the cluster-info publisher. */
export interface ConfiguredBootstrap extends RunningBootstrap {
  components: LeaderComponent[];
}

/** How long the served cluster-info may lag behind the ConfigMap; bounds the API reads a flood causes. */
const clusterInfoCacheMs = 2_000;

/** `kube-public/cluster-info` as the publisher keeps it, read through a short cache; undefined until published. */
export function configMapClusterInfo(core: CoreV1Api): ClusterInfoSource {
  let cached: { at: number; document: Promise<ClusterInfoDocument | undefined> } | undefined;
  const read = async (): Promise<ClusterInfoDocument | undefined> => {
    try {
      const map = await core.readNamespacedConfigMap({
        name: clusterInfoName,
        namespace: clusterInfoNamespace,
      });
      return {
        apiVersion: 'v1',
        kind: 'ConfigMap',
        metadata: { name: clusterInfoName, namespace: clusterInfoNamespace },
        data: map.data ?? {},
      };
    } catch (err) {
      if (httpStatusOfApiError(err) === 404) return undefined;
      throw fromApiException(err, `read configmap ${clusterInfoNamespace}/${clusterInfoName}`);
    }
  };
  return () => {
    const now = Date.now();
    if (!cached || now - cached.at > clusterInfoCacheMs) {
      const document = read();
      cached = { at: now, document };
      // A failed read is not cached: the next request tries again.
      document.catch(() => {
        if (cached?.document === document) cached = undefined;
      });
    }
    return cached.document;
  };
}

/** Builds the dependencies of the configured policies only, then starts the server; `close` also releases the cloud clients. */
export async function startConfiguredBootstrap(
  options: ConfiguredBootstrapOptions,
): Promise<ConfiguredBootstrap> {
  const { config, kubeConfig, logger = silentLogger } = options;
  const names = new Set(policySpecsOf(config).map((spec) => spec.name));
  const core = kubeConfig.makeApiClient(CoreV1Api);
  const closers: (() => void)[] = [];
  const deps: PolicyDeps = {
    replayGuard: new ConfigMapReplayGuard({ core, namespace: config.bootstrap.replayNamespace }),
    tokens: new TokenValidator(apiTokenSource(core)),
    // The audience GCE identity tokens must name: the address nodes use for this server.
    serverUrl: `https://kops-controller.internal.${config.clusterName}:${parseListenAddress(config.server?.Listen ?? ':3988').port}`,
    logger,
  };
  if (names.has('aws')) {
    const region = config.server?.provider.aws?.Region;
    const aws = await createAwsProvider({
      clusterName: config.clusterName,
      ...(region ? { region } : {}),
      ...options.cloud?.aws,
      logger,
    });
    closers.push(() => aws.clients.destroy());
    deps.aws = {
      ...(await awsAccountOf(aws.clients.sts)),
      region: aws.clients.region,
      instances: aws.nodeIdentifier,
    };
  }
  if (names.has('gce')) {
    const gce = await createGceProvider({
      project: config.server?.provider.gce?.projectID,
      clusterName: config.clusterName,
      ...options.cloud?.gce,
      logger,
    });
    deps.gce = { identifier: gce.nodeIdentifier, compute: gce.compute };
  }
  if (names.has('metal') && config.configBase) {
    deps.inventory = new InventoryStore({ vfs: openVfs(config.configBase, options.vfsOptions), logger });
  }
  const release = () => {
    for (const close of closers) close();
  };
  try {
    const running = await startBootstrapServer(config, {
      kubeConfig,
      policies: await buildPolicies(config, deps),
      audit: auditSink(logger),
      vfsOptions: options.vfsOptions,
      registry: options.registry,
      logger,
      clusterInfoHandler: clusterInfoHandler(configMapClusterInfo(core), logger),
      ...options.server,
    });
    const publisher = new ClusterInfoPublisher({
      core,
      source: apiTokenSource(core),
      kubeconfig: () =>
        renderClusterInfoKubeconfig({ servers: [running.apiServer], caBundlePem: bundlePem(running.ca) }),
      logger,
    });
    return {
      ...running,
      components: [running.signer, publisher],
      async close() {
        await running.close();
        release();
      },
    };
  } catch (err) {
    release();
    throw err;
  }
}
