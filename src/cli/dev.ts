/**
 * `kops-controller dev` (what `npm start` runs): a whole simulated kops cluster on loopback — the
 * Kubernetes API, the endpoints of one cloud (AWS by default; `--cloud` picks GCE, Hetzner,
 * DigitalOcean, Linode, OpenStack, Scaleway or Azure) and a state store (S3, or GCS on GCE) with
 * a sample cluster — and the controller running against it in-process, so the product can be tried,
 * and kubectl pointed at it, on a machine with no cloud and no cluster.
 *
 * This is the composition root of `dev`: the controller is the `run` command's own root, started
 * against the simulated cluster (src/cli/dev-controller.ts). The simulator is not part of the product:
 * this module loads it (src/sim/dev-run.ts) only when `dev` actually runs. It is the one production
 * module that reaches into src/sim (src/architecture.test.ts allows exactly this dynamic import), so
 * no other command loads simulator code, and the container image, which ships without src/sim, still
 * runs everything but `dev`.
 */
import { Command, Option } from 'commander';
import { supportedClouds } from '../config/schema.ts';
import { InvalidInputError, UnavailableError } from '../errors.ts';
import type { Logger } from '../log.ts';
import { lockFolder } from '../runtime/folder-lock.ts';
import { commandLogger } from './common.ts';
import { controllerBannerLines, startDevController } from './dev-controller.ts';

/**
 * The clouds `dev --cloud` simulates: every cloud but metal, which has no cloud API to simulate; each
 * is also the name of that cloud's own approval policy.
 */
export type DevCloud = Exclude<(typeof supportedClouds)[number], 'metal'>;
export const devClouds: readonly DevCloud[] = supportedClouds.filter(
  (cloud): cloud is DevCloud => cloud !== 'metal',
);

/** The policies `dev --policy` offers; a cloud's own policy needs a cluster on that cloud. */
export const devPolicies = [...devClouds, 'queue', 'insecure-always-approve'] as const;
export type DevPolicy = (typeof devPolicies)[number];

/** Whether `policy` is a cloud's own policy (which proves nodes with that cloud's identity). */
export function isCloudPolicy(policy: DevPolicy): policy is DevCloud {
  return (devClouds as readonly string[]).includes(policy);
}

/** What `dev` runs with, its flags parsed and checked. */
export interface DevSettings {
  cloud: DevCloud;
  stateDir: string;
  /** Port of the simulated Kubernetes API (0 = any free port). */
  apiPort: number;
  awsThrottling: boolean;
  policy: DevPolicy;
  /** How many new machines join through the bootstrap server. */
  joiningNodes: number;
  logger: Logger;
}

interface DevOptions {
  cloud: DevCloud;
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

/** Parses a count option. */
function parseCount(value: string, flag: string): number {
  if (!/^\d{1,4}$/.test(value))
    throw new InvalidInputError(`${flag} ${value}: expected a number from 0 to 9999`);
  return Number(value);
}

/** The checked settings of a `dev` command line. */
function devSettings(options: DevOptions, logger: Logger): DevSettings {
  const policy: DevPolicy = options.policy ?? options.cloud;
  if (isCloudPolicy(policy) && policy !== options.cloud) {
    throw new InvalidInputError(`--policy ${policy} needs --cloud ${policy}`);
  }
  return {
    cloud: options.cloud,
    stateDir: options.stateDir,
    apiPort: parsePort(options.port, '--port'),
    awsThrottling: options.awsThrottling,
    policy,
    joiningNodes: parseCount(options.joiningNodes, '--joining-nodes'),
    logger,
  };
}

/** The simulator's side of `dev`. */
type Simulator = typeof import('../sim/dev-run.ts');

/**
 * Loads the simulator. Where it is not installed (the container image, or a checkout installed
 * without its development dependencies) `dev` fails with one line that says so.
 */
async function loadSimulator(): Promise<Simulator> {
  try {
    return await import('../sim/dev-run.ts');
  } catch (err) {
    if ((err as { code?: unknown }).code !== 'ERR_MODULE_NOT_FOUND') throw err;
    throw new UnavailableError(
      'dev needs the simulator, which this installation does not have (the container image ships ' +
        'without it): run it from a source checkout after npm ci, with npm start',
      { cause: err },
    );
  }
}

/** The `dev` command. */
export function devCommand(): Command {
  return new Command('dev')
    .description(
      'run a simulated kops cluster (Kubernetes API, a cloud, a state store) on loopback, and the controller against it',
    )
    .addOption(
      new Option('--state-dir <dir>', 'folder for the kubeconfig, config and environment files').default(
        '.kops-dev',
      ),
    )
    .addOption(new Option('--port <port>', 'port of the Kubernetes API (0 = any free port)').default('0'))
    .addOption(new Option('--cloud <cloud>', 'the simulated cloud').choices(devClouds).default('aws'))
    .addOption(new Option('--no-aws-throttling', 'switch off the simulated EC2 request rate limit'))
    .addOption(
      new Option(
        '--policy <name>',
        "approval policy of the bootstrap server (default: the simulated cloud's own policy)",
      ).choices(devPolicies),
    )
    .addOption(
      new Option('--joining-nodes <n>', 'new machines that join through the bootstrap server').default('3'),
    )
    .action(async (options: DevOptions, command: Command) => {
      const settings = devSettings(options, commandLogger(command));
      await runDev(settings, await loadSimulator());
    });
}

/** Resolves on the first SIGINT or SIGTERM. */
function untilStopped(): Promise<void> {
  return new Promise<void>((done) => {
    const stop = () => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      done();
    };
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
}

/** Runs the simulated cluster, the controller against it and the joining machines until stopped. */
async function runDev(settings: DevSettings, sim: Simulator): Promise<void> {
  const { logger } = settings;
  // Another `dev` here would have its kubeconfig, config and node files overwritten under it.
  const lock = await lockFolder(
    settings.stateDir,
    'stop that kops-controller dev (npm start) first, or give this one another --state-dir',
  );
  try {
    const cluster = await sim.startSimulatedCluster(settings.cloud, settings);
    const controller = await startDevController(cluster, { logger, bootstrapPolicy: settings.policy }).catch(
      async (err: unknown) => {
        await cluster.close();
        throw err;
      },
    );
    process.stdout.write(sim.devBanner(cluster, controllerBannerLines(controller)));
    const server = controller.bootstrap;
    const joining =
      server && settings.joiningNodes > 0
        ? sim.startJoining(cluster, { ...settings, server, count: settings.joiningNodes })
        : undefined;
    await untilStopped();
    joining?.stop();
    await controller.stop();
    await cluster.close();
  } finally {
    await lock.release();
  }
}
