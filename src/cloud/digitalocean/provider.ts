/** Wires the DigitalOcean pieces for one cluster: the API client, node identity and cloud groups. */
import { ConfigError } from '../../errors.ts';
import { type Logger, silentLogger } from '../../log.ts';
import { ClusterServerGroups, ClusterServerIdentifier } from '../hetzner/cluster-instances.ts';
import { RestJsonClient, type RestJsonClientOptions } from '../hetzner/rest-json.ts';
import type { CloudCallRecorder, CloudName } from '../metrics.ts';
import {
  DigitalOceanDroplets,
  defaultDigitalOceanEndpoint,
  doClusterTagPrefix,
  doErrorMessage,
  doGroupTagPrefix,
  doProviderIds,
  doSafeClusterName,
  doThrottleWait,
} from './droplets.ts';

/** The variable holding the API token, as for kops and doctl. */
export const doTokenVariable = 'DIGITALOCEAN_ACCESS_TOKEN';
/** The variable that replaces the API endpoint (doctl's `--api-url` as an environment variable). */
export const doEndpointVariable = 'DIGITALOCEAN_API_URL';
/** The metrics' name of this cloud. */
export const doCloud: CloudName = 'digitalocean';

/** What the controller needs to talk to DigitalOcean. */
export interface DigitalOceanProviderOptions {
  clusterName: string;
  /** Default `DIGITALOCEAN_API_URL`, then the public API. */
  endpoint?: string;
  /** Default `DIGITALOCEAN_ACCESS_TOKEN`. */
  token?: string;
  logger?: Logger;
  cloudCalls?: CloudCallRecorder;
  /** Retry and deadline settings of the API client (tests shorten them). */
  api?: Pick<RestJsonClientOptions, 'retries' | 'retryDelayMs' | 'maxRetryWaitMs' | 'timeoutMs'>;
}

/** The DigitalOcean implementations of the cloud interfaces. */
export interface DigitalOceanProvider {
  droplets: DigitalOceanDroplets;
  nodeIdentifier: ClusterServerIdentifier;
  cloudGroups: ClusterServerGroups;
  identifiesByNodeName: false;
  close(): void;
}

/** Builds the DigitalOcean provider; throws ConfigError without a token. */
export function createDigitalOceanProvider(options: DigitalOceanProviderOptions): DigitalOceanProvider {
  const token = options.token ?? process.env[doTokenVariable];
  if (!token)
    throw new ConfigError(`${doTokenVariable} is required on DigitalOcean (an API token with read access)`);
  const api = new RestJsonClient({
    cloud: doCloud,
    title: 'the DigitalOcean API',
    endpoint: options.endpoint ?? (process.env[doEndpointVariable] || defaultDigitalOceanEndpoint),
    token,
    errorMessage: doErrorMessage,
    throttleWait: doThrottleWait,
    ...options.api,
    ...(options.cloudCalls ? { cloudCalls: options.cloudCalls } : {}),
  });
  const droplets = new DigitalOceanDroplets(api, options.clusterName);
  // The identifier compares the tag's value, which kops spells with dashes for dots.
  const tagClusterName = doSafeClusterName(options.clusterName);
  const nodeIdentifier = new ClusterServerIdentifier({
    directory: droplets,
    providerIds: doProviderIds,
    clusterName: tagClusterName,
    noun: 'droplet',
    clusterMark: `tag ${doClusterTagPrefix}${tagClusterName}`,
    groupMark: `${doGroupTagPrefix}<group> tag`,
    logger: options.logger ?? silentLogger,
  });
  return {
    droplets,
    nodeIdentifier,
    cloudGroups: new ClusterServerGroups(nodeIdentifier, options.clusterName),
    identifiesByNodeName: false,
    close: () => api.destroy(),
  };
}
