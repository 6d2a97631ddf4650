/** Wires the Hetzner Cloud pieces for one cluster: the API client, node identity and cloud groups. */
import { type Logger, silentLogger } from '../../log.ts';
import { type ClusterServerProvider, clusterServerProvider, requiredToken } from '../cluster-servers.ts';
import type { CloudCallRecorder, CloudName } from '../metrics.ts';
import { RestJsonClient, type RestJsonClientOptions } from '../rest-json.ts';
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

/** What the controller needs to talk to Hetzner Cloud. */
export interface HetznerProviderOptions {
  clusterName: string;
  /** Default `HCLOUD_ENDPOINT`, then the public API. */
  endpoint?: string;
  /** Default `HCLOUD_TOKEN`. */
  token?: string;
  logger?: Logger;
  cloudCalls?: CloudCallRecorder;
  /** Retry and deadline settings of the API client (tests shorten them). */
  api?: Pick<RestJsonClientOptions, 'retries' | 'retryDelayMs' | 'maxRetryWaitMs' | 'timeoutMs'>;
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
  const api = new RestJsonClient({
    cloud: hetznerCloud,
    title: 'the Hetzner Cloud API',
    endpoint: options.endpoint ?? (process.env[hetznerEndpointVariable] || defaultHetznerEndpoint),
    token,
    errorMessage: hetznerErrorMessage,
    throttleWait: hetznerThrottleWait,
    ...options.api,
    ...(options.cloudCalls ? { cloudCalls: options.cloudCalls } : {}),
  });
  const servers = new HetznerServers(api, options.clusterName);
  const provider = clusterServerProvider({
    directory: servers,
    providerIds: hetznerProviderIds,
    clusterName: options.clusterName,
    noun: 'Hetzner server',
    clusterMark: `label ${hetznerClusterLabel}=${options.clusterName}`,
    groupMark: `label ${hetznerGroupLabel}`,
    logger: options.logger ?? silentLogger,
    close: () => api.destroy(),
  });
  return { ...provider, servers };
}
