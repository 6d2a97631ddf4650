/**
 * What `kops-controller dev` runs once its flags are checked (src/cli/dev.ts loads this module only
 * then): the simulated cluster, the controller against it and the joining machines, until SIGINT or
 * SIGTERM.
 */
import { resolve } from 'node:path';
import type { DevSettings } from '../cli/dev.ts';
import { lockFolder } from '../runtime/folder-lock.ts';
import { type AnyDevCluster, startDevCluster, startGceDevCluster } from './dev-cluster.ts';
import { type DevController, devBanner, startDevController } from './dev-controller.ts';
import { type JoiningNodes, type JoiningStatus, startJoiningNodes } from './joining-nodes.ts';

/** Runs the simulated cluster and its controller until the process is told to stop. */
export async function runDev(settings: DevSettings): Promise<void> {
  const { logger } = settings;
  const clusterOptions = {
    stateDir: settings.stateDir,
    apiPort: settings.apiPort,
    awsThrottling: settings.awsThrottling,
    logger,
  };
  // Another `dev` here would have its kubeconfig, config and node files overwritten under it.
  const lock = await lockFolder(
    settings.stateDir,
    'stop that kops-controller dev (npm start) first, or give this one another --state-dir',
  );
  try {
    const cluster =
      settings.cloud === 'gce'
        ? await startGceDevCluster(clusterOptions)
        : await startDevCluster(clusterOptions);
    let controller: DevController;
    try {
      controller = await startDevController(cluster, { logger, bootstrapPolicy: settings.policy });
    } catch (err) {
      await cluster.close();
      throw err;
    }
    process.stdout.write(devBanner(cluster, controller));
    const joining = startJoining(cluster, controller, settings);
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
}

/** Starts the simulated machines joining, with one live progress line on standard error. */
function startJoining(
  cluster: AnyDevCluster,
  controller: DevController,
  settings: DevSettings,
): JoiningNodes | undefined {
  const { policy, joiningNodes: count, logger } = settings;
  const bootstrap = controller.bootstrap;
  if (!bootstrap || count === 0) return undefined;
  const tty = process.stderr.isTTY;
  const show = (s: JoiningStatus) => {
    const hint = s.waiting ? ' (kubectl get csr; kubectl certificate approve NAME)' : '';
    const line = `joining nodes (policy ${policy}): ${s.joined}/${s.total} joined, ${s.waiting} waiting for approval${hint}, ${s.failed} failed`;
    process.stderr.write(tty ? `\r\x1b[2K${line}` : `${line}\n`);
  };
  const joining = startJoiningNodes({
    cluster,
    server: bootstrap.url,
    caPin: bootstrap.caPin,
    count,
    proof: policy === 'aws' || policy === 'gce' ? 'cloud' : 'none',
    dir: resolve(settings.stateDir, 'nodes'),
    onChange: show,
    logger,
  });
  void joining.done.then(() => {
    if (tty) process.stderr.write('\n');
  });
  return joining;
}
