/** Wires the DigitalOcean pieces for one cluster: the API client, node identity and cloud groups. */
import {
  type ClusterServerCloudOptions,
  type ClusterServerProvider,
  clusterServerProvider,
  requiredToken,
} from '../cluster-servers.ts';
import type { CloudName } from '../metrics.ts';
import { type RestJsonApi, restJsonClientOf } from '../rest-json.ts';
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

const doApi: RestJsonApi = {
  cloud: doCloud,
  title: 'the DigitalOcean API',
  defaultEndpoint: defaultDigitalOceanEndpoint,
  endpointVariable: doEndpointVariable,
  errorMessage: doErrorMessage,
  throttleWait: doThrottleWait,
};

/** What the controller needs to talk to DigitalOcean (the token defaults to `DIGITALOCEAN_ACCESS_TOKEN`). */
export interface DigitalOceanProviderOptions extends ClusterServerCloudOptions {
  /** Default `DIGITALOCEAN_API_URL`, then the public API. */
  endpoint?: string;
}

/** The DigitalOcean implementations of the cloud interfaces. */
export interface DigitalOceanProvider extends ClusterServerProvider {
  droplets: DigitalOceanDroplets;
}

/** Builds the DigitalOcean provider; throws ConfigError without a token. */
export function createDigitalOceanProvider(options: DigitalOceanProviderOptions): DigitalOceanProvider {
  const token = requiredToken(options.token, doTokenVariable, 'DigitalOcean (an API token with read access)');
  const api = restJsonClientOf(doApi, { ...options, token });
  const droplets = new DigitalOceanDroplets(api, options.clusterName);
  // The identifier compares the tag's value, which kops spells with dashes for dots.
  const tagClusterName = doSafeClusterName(options.clusterName);
  const provider = clusterServerProvider({
    directory: droplets,
    providerIds: doProviderIds,
    clusterName: tagClusterName,
    groupsClusterName: options.clusterName,
    noun: 'droplet',
    clusterMark: `tag ${doClusterTagPrefix}${tagClusterName}`,
    groupMark: `${doGroupTagPrefix}<group> tag`,
    logger: options.logger,
    close: () => api.destroy(),
  });
  return { ...provider, droplets };
}
