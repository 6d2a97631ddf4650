/**
 * The simulator's side of `kops-controller dev`, loaded by src/cli/dev.ts only when `dev` runs: the
 * simulated cluster on any of its clouds, the banner that says where its pieces are, and the simulated
 * machines joining. The controller itself is the product's: the command line starts it against the
 * cluster's `target`, and hands back only what the banner and the machines need (plain lines, a URL
 * and a pin), so nothing here imports the command line.
 */
import { resolve } from 'node:path';
import type { Logger } from '../log.ts';
import { type ServerCloud, startServerCloudDevCluster } from './dev-clouds.ts';
import { type AnyDevCluster, type DevCloud, startDevCluster, startGceDevCluster } from './dev-cluster.ts';
import { type JoiningNodes, type JoiningStatus, startJoiningNodes } from './joining-nodes.ts';

/** Starts the simulated cluster of `cloud`. */
export function startSimulatedCluster(
  cloud: DevCloud,
  options: { stateDir: string; apiPort: number; awsThrottling: boolean; logger: Logger },
): Promise<AnyDevCluster> {
  if (cloud === 'aws') return startDevCluster(options);
  if (cloud === 'gce') return startGceDevCluster(options);
  return startServerCloudDevCluster(cloud, options);
}

/** How the banner names each server cloud's simulated endpoints. */
const cloudTitles: Record<ServerCloud, string> = {
  hetzner: 'Hetzner Cloud',
  digitalocean: 'DigitalOcean',
  linode: 'Linode',
  openstack: 'OpenStack',
  scaleway: 'Scaleway',
  azure: 'Azure',
};

/** Where the cloud's simulated endpoints and the state store are. */
function cloudBannerLines(cluster: AnyDevCluster): string[] {
  if (cluster.cloud === 'aws') {
    return [
      `  AWS endpoints   ${cluster.aws.endpoint}  (EC2, Auto Scaling, STS; region ${cluster.region})`,
      `  State store     ${cluster.configBase}  (S3 at ${cluster.s3.endpoint})`,
    ];
  }
  if (cluster.cloud !== 'gce') {
    return [
      `  ${cloudTitles[cluster.cloud].padEnd(15)} ${cluster.sim.description}`,
      `  State store     ${cluster.configBase}  (${cluster.stateStoreDescription})`,
    ];
  }
  return [
    `  GCE endpoints   ${cluster.gce.endpoint}  (compute, instance identity; project ${cluster.project}, zone ${cluster.zone})`,
    `  State store     ${cluster.configBase}  (GCS at ${cluster.gcs.endpoint})`,
  ];
}

/**
 * The banner `dev` prints once everything is up: where each piece is and how to use it, with the
 * controller's own lines (where it serves, discovery and the CA pin) in the middle.
 */
export function devBanner(cluster: AnyDevCluster, controllerLines: readonly string[]): string {
  const groups = [...cluster.nodesByGroup].map(([ig, nodes]) => `${ig}: ${nodes.length}`).join(', ');
  return [
    `Simulated kops cluster ${cluster.clusterName} is up (loopback only).`,
    `  Kubernetes API  ${cluster.api.server.url}`,
    ...cloudBannerLines(cluster),
    `  Nodes           ${groups}`,
    `  Controller config  ${cluster.configPath}`,
    ...controllerLines,
    '',
    `${cluster.api.exportLine}`,
    '',
    `Then try: kubectl get nodes --show-labels. For other tools: source ${resolve(cluster.configPath, '..', 'env')}`,
    'Press Ctrl-C to stop.',
    '',
  ].join('\n');
}

/** What {@link startJoining} needs: the bootstrap server to join and how many machines, under which policy. */
export interface JoiningSettings {
  /** The bootstrap server's URL and the pin of its CA. */
  server: { url: string; caPin: string };
  policy: string;
  count: number;
  stateDir: string;
  logger: Logger;
}

/** Starts the simulated machines joining, with one live progress line on standard error. */
export function startJoining(cluster: AnyDevCluster, settings: JoiningSettings): JoiningNodes {
  const { policy, count, logger } = settings;
  const tty = process.stderr.isTTY;
  const show = (s: JoiningStatus) => {
    const hint = s.waiting ? ' (kubectl get csr; kubectl certificate approve NAME)' : '';
    const line = `joining nodes (policy ${policy}): ${s.joined}/${s.total} joined, ${s.waiting} waiting for approval${hint}, ${s.failed} failed`;
    process.stderr.write(tty ? `\r\x1b[2K${line}` : `${line}\n`);
  };
  const joining = startJoiningNodes({
    cluster,
    server: settings.server.url,
    caPin: settings.server.caPin,
    count,
    // The cloud's own policy: the machines prove themselves as the cloud lets them; any other: no proof.
    proof: policy === cluster.cloud ? 'cloud' : 'none',
    dir: resolve(settings.stateDir, 'nodes'),
    onChange: show,
    logger,
  });
  void joining.done.then(() => {
    if (tty) process.stderr.write('\n');
  });
  return joining;
}
