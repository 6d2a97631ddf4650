/**
 * The IPAM controller of a controller config (`enableCloudIPAM: true`), as kops' setupCloudIPAM picks
 * it: AWS and GCE read pod ranges through the cloud provider's own node identifier (sharing its batches
 * and cache with the NodeController), metal through the `Host` records. Any other cloud has no cloud
 * IPAM in kops either, and is refused at start-up rather than silently ignored.
 */
import type { KubeConfig, V1Node } from '@kubernetes/client-node';
import type { Registry } from 'prom-client';
import type { NodeIdentifier } from '../../cloud/types.ts';
import { ConfigError, InternalError } from '../../errors.ts';
import type { SharedInformer } from '../../kube/shared-informer.ts';
import type { Logger } from '../../log.ts';
import type { NodeEventRecorder } from '../node/node-event-recorder.ts';
import { IpamController } from './ipam-controller.ts';
import { AwsPodCidrSource, GcePodCidrSource, HostPodCidrSource, type PodCidrSource } from './sources.ts';

/** The clouds kops-controller has an IPAM controller for. */
export const ipamClouds = ['aws', 'gce', 'metal'] as const;

/** What the IPAM controller is built from. */
export interface IpamFromConfigOptions {
  /** `config.cloud`. */
  cloud: string;
  /** The cloud provider's own identifier (`cloudFromConfig(...).nodeIdentifier`), not a wrapper of it. */
  nodeIdentifier: NodeIdentifier;
  kubeConfig: KubeConfig;
  /** The process's Node watch. */
  nodes: SharedInformer<V1Node>;
  /** Writes its Events (default: the recorder shared by the controllers of `kubeConfig`). */
  events?: NodeEventRecorder;
  registry: Registry;
  logger?: Logger;
}

/** The cloud's source of pod ranges; its identifier's class is imported only on that cloud (EC2's SDK is large). */
async function sourceOf(options: IpamFromConfigOptions): Promise<PodCidrSource> {
  const { cloud, nodeIdentifier } = options;
  const wrong = () =>
    new InternalError(
      `IPAM on ${cloud} needs the ${cloud} node identifier, not ${nodeIdentifier.constructor.name}`,
    );
  switch (cloud) {
    case 'aws': {
      const { AwsNodeIdentifier } = await import('../../cloud/aws/identify.ts');
      if (!(nodeIdentifier instanceof AwsNodeIdentifier)) throw wrong();
      return new AwsPodCidrSource(nodeIdentifier);
    }
    case 'gce': {
      const { GceNodeIdentifier } = await import('../../cloud/gce/node-identifier.ts');
      if (!(nodeIdentifier instanceof GceNodeIdentifier)) throw wrong();
      return new GcePodCidrSource(nodeIdentifier);
    }
    case 'metal':
      return new HostPodCidrSource({
        kubeConfig: options.kubeConfig,
        registry: options.registry,
        ...(options.logger ? { logger: options.logger } : {}),
      });
    default:
      throw new ConfigError(
        `enableCloudIPAM: kops-controller has cloud IPAM for ${ipamClouds.join(', ')} only, not ${cloud}; remove the setting`,
      );
  }
}

/** Builds the IPAM controller; ConfigError for a cloud without cloud IPAM. */
export async function ipamControllerFromConfig(options: IpamFromConfigOptions): Promise<IpamController> {
  return new IpamController({
    kubeConfig: options.kubeConfig,
    nodes: options.nodes,
    source: await sourceOf(options),
    ...(options.events ? { events: options.events } : {}),
    registry: options.registry,
    ...(options.logger ? { logger: options.logger } : {}),
  });
}
