/**
 * `kops-controller dev` (what `npm start` runs): a whole simulated kops cluster on loopback — the
 * Kubernetes API, the AWS (or, with `--cloud gce`, GCE) endpoints and a state store (S3 or GCS) with
 * a sample cluster — and the controller running against it in-process, so the product can be tried,
 * and kubectl pointed at it, on a machine with no cloud and no cluster.
 */
import { resolve } from 'node:path';
import { CoordinationV1Api, type KubeConfig } from '@kubernetes/client-node';
import { Command, Option } from 'commander';
import { Registry } from 'prom-client';
import { loadConfigFile } from '../config/loader.ts';
import { InvalidInputError } from '../errors.ts';
import { type Logger, silentLogger } from '../log.ts';
import { ControllerRuntime } from '../runtime/controller-runtime.ts';
import { lockFolder } from '../runtime/folder-lock.ts';
import {
  type AnyDevCluster,
  devClientOptions,
  startDevCluster,
  startGceDevCluster,
} from '../sim/dev-cluster.ts';
import { type JoiningNodes, type JoiningStatus, startJoiningNodes } from '../sim/joining-nodes.ts';
import { commandLogger } from './common.ts';
import { type DevBootstrap, type DevPolicy, devPolicies, startDevBootstrap } from './dev-bootstrap.ts';
import { buildLeaderComponents } from './leader-components.ts';

interface DevOptions {
  cloud: 'aws' | 'gce';
  stateDir: string;
  port: string;
  awsThrottling: boolean;
  policy?: DevPolicy;
  joiningNodes: string;
}

/** Parses a TCP port option (0 = any free port). */
export function parsePort(value: string, flag: string): number {
  const port = Number(value);
  if (!/^\d+$/.test(value) || port > 65535) {
    throw new InvalidInputError(`${flag} ${value}: expected a port number between 0 and 65535`);
  }
  return port;
}

/** The controller `dev` runs against its simulated cluster. */
export interface DevController {
  /** Where /healthz, /readyz and /metrics are served. */
  url: string;
  runtime: ControllerRuntime;
  /** The bootstrap server, when asked for. */
  bootstrap?: DevBootstrap;
  /** Stops the controller (releasing its lease) and its cloud clients. */
  stop(): Promise<void>;
}

/**
 * Starts the controller in-process against `cluster`, with the config the cluster wrote and its
 * endpoints and credentials passed explicitly (the process environment is neither read nor changed).
 */
export async function startDevController(
  cluster: AnyDevCluster,
  options: {
    logger?: Logger;
    stateStorePollIntervalMs?: number;
    bootstrapPolicy?: DevPolicy;
    /** Who the controller is to the API server; default the simulator's admin. */
    kubeConfig?: KubeConfig;
  } = {},
): Promise<DevController> {
  const logger = options.logger ?? silentLogger;
  const config = await loadConfigFile(cluster.configPath);
  const kubeConfig = options.kubeConfig ?? cluster.api.server.kubeConfig();
  const registry = new Registry();
  const leader = await buildLeaderComponents({
    config,
    kubeConfig,
    ...devClientOptions(cluster),
    ...(options.stateStorePollIntervalMs
      ? { stateStorePollIntervalMs: options.stateStorePollIntervalMs }
      : {}),
    registry,
    logger,
  });
  let bootstrap: DevBootstrap | undefined;
  try {
    if (options.bootstrapPolicy) {
      bootstrap = await startDevBootstrap(cluster, config, {
        policy: options.bootstrapPolicy,
        kubeConfig,
        registry,
        logger,
      });
    }
    const runtime = new ControllerRuntime({
      config,
      leaseClient: kubeConfig.makeApiClient(CoordinationV1Api),
      components: [...leader.components, ...(bootstrap?.bootstrap.components ?? [])],
      registry,
      logger,
    });
    const server = await runtime.start();
    return {
      url: server.url,
      runtime,
      ...(bootstrap ? { bootstrap } : {}),
      stop: async () => {
        await runtime.stop();
        await bootstrap?.bootstrap.close();
        leader.close();
      },
    };
  } catch (err) {
    await bootstrap?.bootstrap.close();
    leader.close();
    throw err;
  }
}

/** The banner `dev` prints once everything is up: where each piece is and how to use it. */
export function devBanner(cluster: AnyDevCluster, controller?: DevController): string {
  const groups = [...cluster.nodesByGroup].map(([ig, nodes]) => `${ig}: ${nodes.length}`).join(', ');
  return [
    `Simulated kops cluster ${cluster.clusterName} is up (loopback only).`,
    `  Kubernetes API  ${cluster.api.server.url}`,
    ...(cluster.cloud === 'aws'
      ? [
          `  AWS endpoints   ${cluster.aws.endpoint}  (EC2, Auto Scaling, STS; region ${cluster.region})`,
          `  State store     ${cluster.configBase}  (S3 at ${cluster.s3.endpoint})`,
        ]
      : [
          `  GCE endpoints   ${cluster.gce.endpoint}  (compute, instance identity; project ${cluster.project}, zone ${cluster.zone})`,
          `  State store     ${cluster.configBase}  (GCS at ${cluster.gcs.endpoint})`,
        ]),
    `  Nodes           ${groups}`,
    `  Controller config  ${cluster.configPath}`,
    ...(controller
      ? [`  Controller      ${controller.url}/metrics  (labels every node from its instance group)`]
      : []),
    ...(controller?.bootstrap
      ? [
          `  Discovery       ${controller.bootstrap.url}/cluster-info`,
          `  CA pin          ${controller.bootstrap.caPin}`,
        ]
      : []),
    '',
    `${cluster.api.exportLine}`,
    '',
    `Then try: kubectl get nodes --show-labels. For other tools: source ${resolve(cluster.configPath, '..', 'env')}`,
    'Press Ctrl-C to stop.',
    '',
  ].join('\n');
}

/** The `dev` command. */
export function devCommand(): Command {
  return new Command('dev')
    .description(
      'run a simulated kops cluster (Kubernetes API, AWS or GCE, a state store) on loopback, and the controller against it',
    )
    .addOption(
      new Option('--state-dir <dir>', 'folder for the kubeconfig, config and environment files').default(
        '.kops-dev',
      ),
    )
    .addOption(new Option('--port <port>', 'port of the Kubernetes API (0 = any free port)').default('0'))
    .addOption(new Option('--cloud <cloud>', 'the simulated cloud').choices(['aws', 'gce']).default('aws'))
    .addOption(new Option('--no-aws-throttling', 'switch off the simulated EC2 request rate limit'))
    .addOption(
      new Option(
        '--policy <name>',
        'approval policy of the bootstrap server (default: the cloud policy, aws or gce)',
      ).choices(devPolicies),
    )
    .addOption(
      new Option('--joining-nodes <n>', 'new machines that join through the bootstrap server').default('3'),
    )
    .action(async (options: DevOptions, command: Command) => {
      const logger = commandLogger(command);
      const policy: DevPolicy = options.policy ?? options.cloud;
      if ((policy === 'aws' || policy === 'gce') && policy !== options.cloud) {
        throw new InvalidInputError(`--policy ${policy} needs --cloud ${policy}`);
      }
      const joiningCount = parseCount(options.joiningNodes, '--joining-nodes');
      const clusterOptions = {
        stateDir: options.stateDir,
        apiPort: parsePort(options.port, '--port'),
        awsThrottling: options.awsThrottling,
        logger,
      };
      // Another `dev` here would have its kubeconfig, config and node files overwritten under it.
      const lock = await lockFolder(
        options.stateDir,
        'stop that kops-controller dev (npm start) first, or give this one another --state-dir',
      );
      try {
        const cluster =
          options.cloud === 'gce'
            ? await startGceDevCluster(clusterOptions)
            : await startDevCluster(clusterOptions);
        let controller: DevController;
        try {
          controller = await startDevController(cluster, { logger, bootstrapPolicy: policy });
        } catch (err) {
          await cluster.close();
          throw err;
        }
        process.stdout.write(devBanner(cluster, controller));
        const joining = startJoining(cluster, controller, { ...options, policy }, joiningCount, logger);
        await new Promise<void>((done) => {
          const stop = () => {
            process.off('SIGINT', stop);
            process.off('SIGTERM', stop);
            done();
          };
          process.once('SIGINT', stop);
          process.once('SIGTERM', stop);
        });
        joining?.stop();
        await controller.stop();
        await cluster.close();
      } finally {
        await lock.release();
      }
    });
}

/** Parses a count option. */
function parseCount(value: string, flag: string): number {
  if (!/^\d{1,4}$/.test(value))
    throw new InvalidInputError(`${flag} ${value}: expected a number from 0 to 9999`);
  return Number(value);
}

/** Starts the simulated machines joining, with one live progress line on standard error. */
function startJoining(
  cluster: AnyDevCluster,
  controller: DevController,
  options: DevOptions & { policy: DevPolicy },
  count: number,
  logger: Logger,
): JoiningNodes | undefined {
  const bootstrap = controller.bootstrap;
  if (!bootstrap || count === 0) return undefined;
  const tty = process.stderr.isTTY;
  const show = (s: JoiningStatus) => {
    const hint = s.waiting ? ' (kubectl get csr; kubectl certificate approve NAME)' : '';
    const line = `joining nodes (policy ${options.policy}): ${s.joined}/${s.total} joined, ${s.waiting} waiting for approval${hint}, ${s.failed} failed`;
    process.stderr.write(tty ? `\r\x1b[2K${line}` : `${line}\n`);
  };
  const joining = startJoiningNodes({
    cluster,
    server: bootstrap.url,
    caPin: bootstrap.caPin,
    count,
    proof: options.policy === 'aws' || options.policy === 'gce' ? 'cloud' : 'none',
    dir: resolve(options.stateDir, 'nodes'),
    onChange: show,
    logger,
  });
  void joining.done.then(() => {
    if (tty) process.stderr.write('\n');
  });
  return joining;
}
