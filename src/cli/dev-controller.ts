/**
 * The controller `dev` runs against a simulated cluster: the `run` command's own composition root
 * (src/cli/run.ts `startController`) with the config the cluster wrote, its endpoints and credentials
 * passed explicitly (the process environment is neither read nor changed), and — when a policy is
 * asked for — the real bootstrap server signing with the cluster's CA (so, as in kops, one CA serves
 * the API and certifies the nodes, and the API server trusts the node certificates it issues).
 *
 * The simulator describes its cluster in the product's terms ({@link DevTarget}); this module never
 * imports it, so the product's side of `dev` is built from the same roots as `run`.
 */
import { createPrivateKey } from 'node:crypto';
import type { KubeConfig } from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import type { CloudOverrides } from '../cloud/from-config.ts';
import { loadConfigFile } from '../config/loader.ts';
import { bootstrapPolicySpec, type Config } from '../config/schema.ts';
import { InvalidInputError } from '../errors.ts';
import { type Logger, silentLogger } from '../log.ts';
import { bundlePem, caFromPem } from '../pki/ca.ts';
import { pinOfCertificatePem } from '../pki/pin.ts';
import type { VfsOptions } from '../statestore/open.ts';
import { type DevCloud, type DevPolicy, isCloudPolicy } from './dev.ts';
import { collectProcessMetrics, type RunningController, startController } from './run.ts';

/** A simulated cluster as the controller sees it: what `dev` points the product at. */
export interface DevTarget {
  cloud: DevCloud;
  /** The controller config the simulated cluster wrote. */
  configPath: string;
  /** The simulated API server: its URL, an admin kubeconfig, and the cluster CA it serves with. */
  apiServer: { url: string; kubeConfig(): KubeConfig; caCertificatePem: string; caPrivateKeyPem: string };
  /** How the controller reaches the simulated cloud and state store. */
  clients: { cloud: CloudOverrides; vfsOptions: VfsOptions };
  /** The `bootstrap.policies` entry of the cloud's own policy, pointed at the simulated endpoints. */
  cloudPolicy: Record<string, unknown>;
}

/** The bootstrap side of a running dev controller: what a node needs to reach it. */
export interface DevBootstrap {
  /** The bootstrap endpoint; discovery is `<url>/cluster-info`. */
  url: string;
  /** The pin of the cluster CA, for `join --ca-pin`. */
  caPin: string;
}

/** The controller `dev` runs against its simulated cluster. */
export interface DevController {
  /** Where /healthz, /readyz and /metrics are served. */
  url: string;
  controller: RunningController;
  /** The bootstrap server, when a policy was asked for. */
  bootstrap?: DevBootstrap;
  /** Stops the controller (releasing its lease), its bootstrap server and its cloud clients. */
  stop(): Promise<void>;
}

/** The policy spec of `policy` for `target`: the cloud policies point at the cluster's simulators. */
function policySpecOf(target: DevTarget, policy: DevPolicy): Record<string, unknown> {
  if (!isCloudPolicy(policy)) return { name: policy };
  if (target.cloud !== policy) {
    throw new InvalidInputError(
      `--policy ${policy} needs --cloud ${policy}; this cluster runs on ${target.cloud}`,
    );
  }
  return target.cloudPolicy;
}

/**
 * The config the controller runs with: the chain the cluster's config has (the cloud's policy, then
 * `renewal`, as every default chain), with the asked-for policy in the cloud's place, so `join --renew`
 * works on the dev cluster as on a real one. `queue` and `insecure-always-approve` decide every
 * request, renewals included, so `renewal` goes before them instead of after.
 */
export function devConfig(config: Config, target: DevTarget, policy: DevPolicy): Config {
  const spec = bootstrapPolicySpec.parse(policySpecOf(target, policy));
  const renewal = bootstrapPolicySpec.parse({ name: 'renewal' });
  const policies = isCloudPolicy(policy) ? [spec, renewal] : [renewal, spec];
  return { ...config, bootstrap: { ...config.bootstrap, policies } };
}

/**
 * Starts the controller in-process against `cluster` (anything that carries a {@link DevTarget}),
 * with the bootstrap server when `bootstrapPolicy` is given.
 */
export async function startDevController(
  cluster: { target: DevTarget },
  options: {
    logger?: Logger;
    bootstrapPolicy?: DevPolicy;
    /** Who the controller is to the API server; default the simulator's admin. */
    kubeConfig?: KubeConfig;
  } = {},
): Promise<DevController> {
  const { target } = cluster;
  const api = target.apiServer;
  const ca = caFromPem(api.caCertificatePem, createPrivateKey(api.caPrivateKeyPem));
  const config = await loadConfigFile(target.configPath);
  const policy = options.bootstrapPolicy;
  // The same /metrics as `run`'s: the process metrics too.
  const registry = new Registry();
  collectProcessMetrics(registry);
  const controller = await startController({
    config: policy ? devConfig(config, target, policy) : config,
    kubeConfig: options.kubeConfig ?? api.kubeConfig(),
    ...target.clients,
    bootstrap: policy
      ? { listen: '127.0.0.1:0', ca, apiServer: api.url, serverNames: { ipAddresses: ['127.0.0.1'] } }
      : false,
    registry,
    logger: options.logger ?? silentLogger,
  });
  const bootstrap = controller.bootstrap
    ? { url: controller.bootstrap.server.url, caPin: pinOfCertificatePem(bundlePem(ca)) }
    : undefined;
  return { url: controller.url, controller, bootstrap, stop: () => controller.stop() };
}

/** The banner lines that say where the controller and its bootstrap server are. */
export function controllerBannerLines(controller: DevController | undefined): string[] {
  if (!controller) return [];
  const lines = [`  Controller      ${controller.url}/metrics  (labels every node from its instance group)`];
  if (controller.bootstrap) {
    lines.push(
      `  Discovery       ${controller.bootstrap.url}/cluster-info`,
      `  CA pin          ${controller.bootstrap.caPin}`,
    );
  }
  return lines;
}
