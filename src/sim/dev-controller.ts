/**
 * The controller `dev` runs against its simulated cluster: the real leader components (and, when
 * asked, the real bootstrap server) started in-process with the config the cluster wrote, and the
 * banner that says where everything is.
 */
import { resolve } from 'node:path';
import { CoordinationV1Api, type KubeConfig } from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import type { DevPolicy } from '../cli/dev.ts';
import { buildLeaderComponents } from '../cli/leader-components.ts';
import { loadConfigFile } from '../config/loader.ts';
import { type Logger, silentLogger } from '../log.ts';
import { ControllerRuntime } from '../runtime/controller-runtime.ts';
import { type DevBootstrap, startDevBootstrap } from './dev-bootstrap.ts';
import { type AnyDevCluster, devClientOptions } from './dev-cluster.ts';

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
