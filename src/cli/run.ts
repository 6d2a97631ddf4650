/**
 * `kops-controller run --conf FILE`: the controller process. Loads the config and the kubeconfig,
 * serves /healthz, /readyz and /metrics, campaigns for the leader lease and runs the leader-only
 * components while it holds it. SIGTERM or SIGINT shuts down cleanly: the components stop, the lease
 * is released so a standby takes over at once, and the process exits 0.
 */

import { CoordinationV1Api } from '@kubernetes/client-node';
import { Command, Option } from 'commander';
import { collectDefaultMetrics, type Registry, register } from 'prom-client';
import { loadConfigFile } from '../config/loader.ts';
import { configWarnings } from '../config/warnings.ts';
import { loadKubeConfig } from '../kube/client.ts';
import { defaultConnectionLimits } from '../net/hardened-server.ts';
import { ControllerRuntime, type LeaderComponent } from '../runtime/controller-runtime.ts';
import { vfsOptionsFromEnv } from '../statestore/open.ts';
import { type ConfiguredBootstrap, startConfiguredBootstrap } from './bootstrap-server.ts';
import { commandLogger, type KubeOptions, withConnectionCaps, withKubeOptions } from './common.ts';
import { buildLeaderComponents } from './leader-components.ts';

interface RunOptions extends KubeOptions {
  conf: string;
  bootstrapMaxConnections: number;
  bootstrapMaxConnectionsPerSource: number;
}

/** Where kops mounts the controller's config file. */
export const defaultConfigPath = '/etc/kubernetes/kops-controller/config.yaml';

/** Adds the process metrics (CPU, memory, event-loop lag, ...) to `registry` once. */
function collectProcessMetrics(registry: Registry): void {
  if (!registry.getSingleMetric('process_cpu_user_seconds_total'))
    collectDefaultMetrics({ register: registry });
}

/** The `run` command. */
export function runCommand(): Command {
  const command = withKubeOptions(
    new Command('run')
      .description(
        'run the controller: health and metrics endpoints, leader election, leader-only controllers',
      )
      .addOption(new Option('--conf <file>', 'controller configuration file').default(defaultConfigPath)),
  );
  // The bootstrap server's caps; the metrics port's are fixed (docs/operations.md).
  return withConnectionCaps(command, 'bootstrap-', 'the bootstrap server', defaultConnectionLimits).action(
    run,
  );
}

async function run(options: RunOptions, command: Command): Promise<void> {
  const logger = commandLogger(command);
  const config = await loadConfigFile(options.conf);
  for (const warning of configWarnings(config)) logger.warn(warning);
  const { kubeConfig, source } = loadKubeConfig({
    kubeconfig: options.kubeconfig,
    context: options.context,
  });
  logger.info(
    {
      cluster: config.clusterName,
      cloud: config.cloud,
      kubeconfig: source,
      server: kubeConfig.getCurrentCluster()?.server,
    },
    'starting kops-controller',
  );
  collectProcessMetrics(register);
  // The CSR controllers join this list as they are built; the runtime supervises them.
  const leader = await buildLeaderComponents({
    config,
    kubeConfig,
    vfsOptions: vfsOptionsFromEnv(process.env),
    registry: register,
    logger,
  });
  let bootstrap: ConfiguredBootstrap | undefined;
  let runtime: ControllerRuntime | undefined;
  const shutdown = (signal: NodeJS.Signals) => {
    logger.info({ signal }, 'shutting down');
    void runtime?.stop();
  };
  // Whatever started is stopped whatever fails next, a port that is taken included: a server left
  // listening would keep the process alive after its error.
  try {
    // The bootstrap server runs on every replica; its CSR signer and cluster-info publisher on the leader.
    if (config.server) {
      bootstrap = await startConfiguredBootstrap({
        config,
        kubeConfig,
        vfsOptions: vfsOptionsFromEnv(process.env),
        registry: register,
        logger,
        server: {
          connectionLimits: {
            maxConnections: options.bootstrapMaxConnections,
            maxConnectionsPerSource: options.bootstrapMaxConnectionsPerSource,
          },
        },
      });
    }
    const components: LeaderComponent[] = [...leader.components, ...(bootstrap?.components ?? [])];
    runtime = new ControllerRuntime({
      config,
      leaseClient: kubeConfig.makeApiClient(CoordinationV1Api),
      components,
      registry: register,
      logger,
    });
    await runtime.start();
    process.once('SIGTERM', shutdown);
    process.once('SIGINT', shutdown);
    await runtime.done;
  } finally {
    await bootstrap?.close();
    leader.close();
    process.off('SIGTERM', shutdown);
    process.off('SIGINT', shutdown);
  }
}
