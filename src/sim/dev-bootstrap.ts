/**
 * The bootstrap side of `kops-controller dev`: the real bootstrap server for the simulated cluster,
 * under one policy, signing with the simulated API server's CA (so, as in kops, one CA serves the API
 * and certifies the nodes, and the API server trusts the node certificates it issues).
 */
import { createPrivateKey } from 'node:crypto';
import type { KubeConfig } from '@kubernetes/client-node';
import type { Registry } from 'prom-client';
import { type ConfiguredBootstrap, startConfiguredBootstrap } from '../cli/bootstrap-server.ts';
import type { DevPolicy } from '../cli/dev.ts';
import { bootstrapPolicySpec, type Config } from '../config/schema.ts';
import { InvalidInputError } from '../errors.ts';
import type { Logger } from '../log.ts';
import { bundlePem, caFromPem } from '../pki/ca.ts';
import { pinOfCertificatePem } from '../pki/pin.ts';
import { type AnyDevCluster, devClientOptions, devGceAudience } from './dev-cluster.ts';

/** The policy spec of `policy` for `cluster`: the cloud policies point at the cluster's simulators. */
function policySpecOf(cluster: AnyDevCluster, policy: DevPolicy): Record<string, unknown> {
  if (policy === 'aws' || policy === 'gce') {
    if (cluster.cloud !== policy) {
      throw new InvalidInputError(
        `--policy ${policy} needs --cloud ${policy}; this cluster runs on ${cluster.cloud}`,
      );
    }
    return cluster.cloud === 'aws'
      ? { name: 'aws', stsEndpoint: cluster.aws.endpoint }
      : { name: 'gce', jwksUrl: cluster.gce.jwksUri, audience: devGceAudience };
  }
  return { name: policy };
}

/** The running dev bootstrap server and what a node needs to reach it. */
export interface DevBootstrap {
  bootstrap: ConfiguredBootstrap;
  /** The bootstrap endpoint; discovery is `<url>/cluster-info`. */
  url: string;
  /** The pin of the cluster CA, for `join --ca-pin`. */
  caPin: string;
}

/** Starts the bootstrap server of `cluster` under `policy`; its leader components go to the runtime. */
export async function startDevBootstrap(
  cluster: AnyDevCluster,
  config: Config,
  options: { policy: DevPolicy; registry: Registry; logger: Logger; kubeConfig?: KubeConfig },
): Promise<DevBootstrap> {
  const sim = cluster.api.server;
  const ca = caFromPem(sim.caCertificate, createPrivateKey(sim.certificateAuthority.privateKey));
  const policy = bootstrapPolicySpec.parse(policySpecOf(cluster, options.policy));
  const bootstrap = await startConfiguredBootstrap({
    config: { ...config, bootstrap: { ...config.bootstrap, policies: [policy] } },
    kubeConfig: options.kubeConfig ?? sim.kubeConfig(),
    ...devClientOptions(cluster),
    registry: options.registry,
    logger: options.logger,
    server: {
      listen: '127.0.0.1:0',
      ca,
      apiServer: sim.url,
      serverNames: { ipAddresses: ['127.0.0.1'] },
    },
  });
  return { bootstrap, url: bootstrap.server.url, caPin: pinOfCertificatePem(bundlePem(ca)) };
}
