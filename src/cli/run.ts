/**
 * `kops-controller run --conf FILE`: the controller process. Loads the config and the kubeconfig,
 * serves /healthz, /readyz and /metrics, campaigns for the leader lease and runs the leader-only
 * components while it holds it. SIGTERM or SIGINT shuts down cleanly: the components stop, the lease
 * is released so a standby takes over at once, and the process exits 0. The same shutdown, ending in
 * exit 75, follows when the CA the bootstrap server loaded is replaced in its store
 * (src/cli/ca-watch.ts), so that Kubernetes restarts the process with the new CA. The bootstrap server serves
 * from `--bootstrap-workers` processes (default: one per core but one; src/bootstrap/workers.ts); leader
 * election and the controllers stay in this one.
 */

import { availableParallelism } from 'node:os';
import { CoordinationV1Api, type KubeConfig } from '@kubernetes/client-node';
import { Command, Option } from 'commander';
import { collectDefaultMetrics, type Registry, register } from 'prom-client';
import type { CloudOverrides } from '../cloud/from-config.ts';
import { loadConfigFile } from '../config/loader.ts';
import type { Config } from '../config/schema.ts';
import { exitCodeOf, type KopsError } from '../errors.ts';
import { loadKubeConfig } from '../kube/client.ts';
import { csrInformer, nodeInformer } from '../kube/shared-informer.ts';
import type { Logger } from '../log.ts';
import { registerLogMetrics } from '../log-metrics.ts';
import { defaultConnectionLimits } from '../net/hardened-server.ts';
import { ControllerRuntime, informerSynced } from '../runtime/controller-runtime.ts';
import { type VfsOptions, vfsOptionsFromEnv } from '../statestore/open.ts';
import {
  type ConfiguredBootstrap,
  type ConfiguredBootstrapOptions,
  startConfiguredBootstrap,
} from './bootstrap-server.ts';
import { commandLogger, countOf, type KubeOptions, withConnectionCaps, withKubeOptions } from './common.ts';
import { exitAfterGrace, exitGraceMs } from './exit-grace.ts';
import { buildLeaderComponents } from './leader-components.ts';

interface RunOptions extends KubeOptions {
  conf: string;
  bootstrapMaxConnections: number;
  bootstrapMaxConnectionsPerSource: number;
  bootstrapWorkers: number;
}

/**
 * Serving processes by default: one per core but one, which the main process keeps for the
 * controllers, the shared caps and the nodes' traffic to it. On two cores that is one process: two
 * workers measured slower there than one (docs/performance.md, "Every core serves").
 */
export function defaultBootstrapWorkers(cores = availableParallelism()): number {
  return Math.max(1, cores - 1);
}

/** Where kops mounts the controller's config file. */
export const defaultConfigPath = '/etc/kubernetes/kops-controller/config.yaml';

/**
 * Adds the standard Node.js process metrics (`process_*`, `nodejs_*`: CPU, memory, event-loop lag,
 * ...) and the log lines dropped to `registry` once: `run` on its registry, `dev` on its
 * controller's (src/cli/dev-controller.ts).
 */
export function collectProcessMetrics(registry: Registry): void {
  if (!registry.getSingleMetric('process_cpu_user_seconds_total'))
    collectDefaultMetrics({ register: registry });
  registerLogMetrics(registry);
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
  return withConnectionCaps(command, 'bootstrap-', 'the bootstrap server', defaultConnectionLimits)
    .addOption(
      new Option(
        '--bootstrap-workers <n>',
        'processes that serve the bootstrap server, sharing its port, caps and rate limit (1: this process only)',
      )
        .argParser(countOf('--bootstrap-workers'))
        .default(defaultBootstrapWorkers(), 'the number of cores minus one, at least 1'),
    )
    .action(run);
}

async function run(options: RunOptions, command: Command): Promise<void> {
  const logger = commandLogger(command);
  const config = await loadConfigFile(options.conf);
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
  // A signal while starting (the STS account lookup may wait up to 90 s): no lease is held yet, so the
  // process ends at once with 0, as a stop does. A bootstrap server already serving (with several
  // workers, the first may serve while the others wait) drops its requests in flight: nodes retry.
  // A start-up that failed and is still cleaning up when the signal comes exits 0 too (without its
  // error line): the pod was being stopped anyway.
  const signals = new SignalRelay((signal) => {
    logger.info({ signal }, 'shutting down before start-up ended');
    process.exit(0);
  });
  const controller = await startController({
    config,
    kubeConfig,
    vfsOptions: vfsOptionsFromEnv(process.env),
    bootstrap: {
      connectionLimits: {
        maxConnections: options.bootstrapMaxConnections,
        maxConnectionsPerSource: options.bootstrapMaxConnectionsPerSource,
      },
      workers: options.bootstrapWorkers,
    },
    registry: register,
    logger,
  }).catch((err: unknown) => {
    // Failed to start: main() prints the line and exits with its code, which a signal must not turn to 0.
    signals.close();
    throw err;
  });
  // A restart asked for is thrown from here: main() prints its line and exits with its code.
  await runUntilStopped(controller, logger, signals);
  // Stopped cleanly: a call that takes no signal must not hold the process past the pod's grace.
  exitAfterGrace(undefined, (handles) =>
    logger.warn(
      { handles },
      `stopped, but open handles kept the process alive for ${exitGraceMs} ms; exiting`,
    ),
  );
}

/**
 * Runs the started controller until SIGTERM or SIGINT, or until its bootstrap server's CA was replaced
 * in its store; either way through the same graceful shutdown (components stopped, lease released,
 * bootstrap server closed). A replaced CA is then thrown, with one log line first: main() prints it
 * and exits 75, and the kubelet starts the container again, which loads the new CA (why a restart and
 * not a swap: src/cli/ca-watch.ts). A signal that came first wins: the replica was stopping anyway.
 */
export async function runUntilStopped(
  controller: Pick<RunningController, 'runtime' | 'bootstrap' | 'stop'>,
  logger: Logger,
  signals?: SignalRelay,
): Promise<void> {
  let stopping = false;
  let restart: KopsError | undefined;
  const relay = signals ?? new SignalRelay(() => undefined);
  const shutdown = (signal: NodeJS.Signals) => {
    // Listened for once: a second signal acts as a signal does (an operator's second Ctrl-C or kill
    // ends a stop that hangs).
    relay.close();
    stopping = true;
    logger.info({ signal }, 'shutting down');
    void controller.runtime.stop();
  };
  void controller.bootstrap?.caReplaced.then((err) => {
    if (stopping) return;
    stopping = true;
    restart = err;
    logger.warn({ reason: err.reasonCode, exitCode: exitCodeOf(err) }, `shutting down: ${err.message}`);
    void controller.runtime.stop();
  });
  relay.handleWith(shutdown);
  try {
    await controller.runtime.done;
  } finally {
    try {
      await controller.stop();
    } finally {
      relay.close();
    }
  }
  if (restart) throw restart;
}

/**
 * SIGTERM and SIGINT, passed to whichever handler the process is at: one listener each for the
 * process's life. Removing the last listener of a signal and adding another loses a signal that
 * arrives meanwhile (measured: a SIGTERM sent as start-up ended was never handled), and a lost
 * SIGTERM leaves a pod to its grace period and SIGKILL.
 */
export class SignalRelay {
  #handle: (signal: NodeJS.Signals) => void;
  readonly #relay = (signal: NodeJS.Signals) => this.#handle(signal);

  constructor(handle: (signal: NodeJS.Signals) => void) {
    this.#handle = handle;
    process.on('SIGTERM', this.#relay);
    process.on('SIGINT', this.#relay);
  }

  /** From now on, signals go to `handle`. */
  handleWith(handle: (signal: NodeJS.Signals) => void): void {
    this.#handle = handle;
  }

  /** Stops listening (again: a no-op); a signal from then on acts as it would without a listener. */
  close(): void {
    process.off('SIGTERM', this.#relay);
    process.off('SIGINT', this.#relay);
  }
}

/**
 * What the controller process is built from: `run` reads it from its flags, files and environment;
 * `dev` from its simulated cluster.
 */
export interface ControllerOptions {
  config: Config;
  kubeConfig: KubeConfig;
  /** How the state store is reached. */
  vfsOptions: VfsOptions;
  /** Cloud endpoints and credentials other than the defaults (the simulator's, in `dev`). */
  cloud?: CloudOverrides;
  /**
   * The bootstrap server's connection caps, and `dev`'s listen address, CA and API server URL; `false`
   * serves none even though the config has a server section (which also holds the cloud's settings).
   */
  bootstrap?: ConfiguredBootstrapOptions['server'] | false;
  registry: Registry;
  /** How long one `/metrics` exposition answers every scrape (the benchmarks time each build: 0). */
  metricsReuseMs?: number;
  logger: Logger;
}

/** The running controller process. */
export interface RunningController {
  /** Where /healthz, /readyz and /metrics are served. */
  url: string;
  runtime: ControllerRuntime;
  /** The bootstrap server, when the config has a `server` section. */
  bootstrap?: ConfiguredBootstrap;
  /** Stops the runtime (releasing the lease), then the bootstrap server, then the cloud clients. */
  stop(): Promise<void>;
}

/**
 * The composition root of the controller process, for `run` and `dev`: the leader-only components
 * (src/cli/leader-components.ts), the bootstrap server on every replica when the config has a
 * `server` section, with its own leader-only work (src/cli/bootstrap-server.ts), and the runtime that
 * serves /metrics, campaigns for the lease and supervises the components. Whatever started is stopped
 * whatever fails next, a port that is taken included: a server left listening would keep the process
 * alive after its error.
 */
export async function startController(options: ControllerOptions): Promise<RunningController> {
  const { config, kubeConfig, registry, logger } = options;
  // One Node watch for the process, held for its lifetime: a standby replica keeps it synced, so a
  // new leader's controllers start from a warm cache instead of listing every Node again.
  // The same for every CertificateSigningRequest (the kubelet CSR approver, the expiry ledger).
  const nodes = nodeInformer(kubeConfig, { registry, logger });
  const csrs = csrInformer(kubeConfig, { registry, logger });
  const closeWatches = () => Promise.all([nodes.close(), csrs.close()]);
  const leader = await buildLeaderComponents({ ...options, nodes, csrs });
  let bootstrap: ConfiguredBootstrap | undefined;
  try {
    if (config.server && options.bootstrap !== false) {
      bootstrap = await startConfiguredBootstrap({ ...options, nodes, csrs, server: options.bootstrap });
    }
    // After every consumer has added its view.
    nodes.start();
    csrs.start();
    const runtime = new ControllerRuntime({
      config,
      leaseClient: kubeConfig.makeApiClient(CoordinationV1Api),
      components: [...leader.components, ...(bootstrap?.components ?? [])],
      // Ready once the Node cache has synced, on standby replicas too: a leader starts from it.
      readinessChecks: [informerSynced(nodes)],
      registry,
      ...(options.metricsReuseMs === undefined ? {} : { metricsReuseMs: options.metricsReuseMs }),
      logger,
    });
    const ops = await runtime.start();
    return {
      url: ops.url,
      runtime,
      bootstrap,
      stop: async () => {
        try {
          await runtime.stop();
          await bootstrap?.close();
        } finally {
          await closeWatches();
          leader.close();
        }
      },
    };
  } catch (err) {
    await bootstrap?.close().catch(() => undefined);
    await closeWatches();
    leader.close();
    throw err;
  }
}
