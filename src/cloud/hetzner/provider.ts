/** Wires the Hetzner Cloud pieces for one cluster: the API client, node identity and cloud groups. */
import {
  type ClusterServerCloudOptions,
  type ClusterServerProvider,
  clusterServerProvider,
  requiredToken,
} from '../cluster-servers.ts';
import type { CloudName } from '../metrics.ts';
import { type RestJsonApi, restJsonClientOf } from '../rest-json.ts';
import {
  defaultHetznerEndpoint,
  HetznerServers,
  hetznerClusterLabel,
  hetznerErrorMessage,
  hetznerGroupLabel,
  hetznerProviderIds,
  hetznerThrottleWait,
} from './servers.ts';

/** The variable holding the API token, as for kops and the hcloud CLI. */
export const hetznerTokenVariable = 'HCLOUD_TOKEN';
/** The variable that replaces the API endpoint, as for the hcloud CLI and hcloud-go. */
export const hetznerEndpointVariable = 'HCLOUD_ENDPOINT';
/** The metrics' name of this cloud. */
export const hetznerCloud: CloudName = 'hetzner';

const hetznerApi: RestJsonApi = {
  cloud: hetznerCloud,
  title: 'the Hetzner Cloud API',
  defaultEndpoint: defaultHetznerEndpoint,
  endpointVariable: hetznerEndpointVariable,
  errorMessage: hetznerErrorMessage,
  throttleWait: hetznerThrottleWait,
};

/** What the controller needs to talk to Hetzner Cloud (the token defaults to `HCLOUD_TOKEN`). */
export interface HetznerProviderOptions extends ClusterServerCloudOptions {
  /** Default `HCLOUD_ENDPOINT`, then the public API. */
  endpoint?: string;
}

/** The Hetzner implementations of the cloud interfaces. */
export interface HetznerProvider extends ClusterServerProvider {
  servers: HetznerServers;
}

/** Builds the Hetzner provider; throws ConfigError without a token. */
export function createHetznerProvider(options: HetznerProviderOptions): HetznerProvider {
  const token = requiredToken(
    options.token,
    hetznerTokenVariable,
    'Hetzner Cloud (an API token with read access)',
  );
  const api = restJsonClientOf(hetznerApi, { ...options, token });
  const servers = new HetznerServers(api, options.clusterName);
  const provider = clusterServerProvider({
    directory: servers,
    providerIds: hetznerProviderIds,
    clusterName: options.clusterName,
    noun: 'Hetzner server',
    clusterMark: `label ${hetznerClusterLabel}=${options.clusterName}`,
    groupMark: `label ${hetznerGroupLabel}`,
    logger: options.logger,
    close: () => api.destroy(),
  });
  return { ...provider, servers };
}
