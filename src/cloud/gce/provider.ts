/** Wires the GCE pieces for one cluster: the compute client, node identity and cloud groups. */
import type { AuthClient } from 'google-auth-library';
import { ConfigError } from '../../errors.ts';
import { type Logger, silentLogger } from '../../log.ts';
import type { CloudCallRecorder } from '../metrics.ts';
import { GceCloudGroups } from './cloud-groups.ts';
import { ComputeClient, defaultAuthClient } from './compute.ts';
import { GceNodeIdentifier } from './node-identifier.ts';

/** The environment variable that replaces the compute endpoint, as it does for gcloud. */
export const computeEndpointVariable = 'CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE';

/** What the controller needs to know to talk to GCE. */
export interface GceProviderOptions {
  /** The cluster's project (`server.provider.gce.projectID`, or `GCP_PROJECT`). */
  project: string | undefined;
  clusterName: string;
  /** The compute endpoint; default `CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE`, then Google's. */
  endpoint?: string;
  /** Credentials; defaults to Application Default Credentials (the VM's service account on GCE). */
  auth?: Pick<AuthClient, 'request'>;
  logger?: Logger;
  /** Where the compute client counts its calls (default: nowhere). */
  cloudCalls?: CloudCallRecorder;
}

/** The GCE implementations of the cloud interfaces. */
export interface GceProvider {
  compute: ComputeClient;
  nodeIdentifier: GceNodeIdentifier;
  cloudGroups: GceCloudGroups;
  /** Ends the compute calls in flight and refuses new ones (shutdown). */
  close(): void;
}

/** Builds the GCE provider; throws ConfigError when the project is unknown. */
export async function createGceProvider(options: GceProviderOptions): Promise<GceProvider> {
  const project = options.project ?? process.env['GCP_PROJECT'];
  if (!project) {
    throw new ConfigError('the GCE project is unknown: set server.provider.gce.projectID or GCP_PROJECT');
  }
  const logger = options.logger ?? silentLogger;
  // gcloud's own override variable: the same setting points both at a private endpoint or a simulator.
  const endpoint = options.endpoint ?? (process.env[computeEndpointVariable] || undefined);
  const compute = new ComputeClient({
    project,
    auth: options.auth ?? (await defaultAuthClient()),
    ...(endpoint ? { endpoint } : {}),
    logger,
    ...(options.cloudCalls ? { cloudCalls: options.cloudCalls } : {}),
  });
  return {
    compute,
    nodeIdentifier: new GceNodeIdentifier({ compute, clusterName: options.clusterName, logger }),
    cloudGroups: new GceCloudGroups({ compute, logger }),
    close: () => compute.close(),
  };
}
