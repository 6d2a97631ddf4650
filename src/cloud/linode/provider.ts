/** Wires the Akamai (Linode) pieces for one cluster: the SDK client, node identity and cloud groups. */
import {
  type ClusterServerCloudOptions,
  type ClusterServerProvider,
  clusterServerProvider,
  requiredToken,
} from '../cluster-servers.ts';
import {
  LinodeApi,
  LinodeInstances,
  linodeClusterTagPrefix,
  linodeGroupTagPrefix,
  linodeProviderIds,
} from './instances.ts';

/** The variable holding the API token, as for kops and linode-cli. */
export const linodeTokenVariable = 'LINODE_TOKEN';
/** The variable that replaces the API origin, as for linodego (`LINODE_URL`). */
export const linodeUrlVariable = 'LINODE_URL';

/** What the controller needs to talk to Linode (the token defaults to `LINODE_TOKEN`). */
export interface LinodeProviderOptions extends ClusterServerCloudOptions {
  /** Default `LINODE_URL`, then the public API. */
  origin?: string;
}

/** The Linode implementations of the cloud interfaces. */
export interface LinodeProvider extends ClusterServerProvider {
  instances: LinodeInstances;
}

/** Builds the Linode provider; throws ConfigError without a token. */
export function createLinodeProvider(options: LinodeProviderOptions): LinodeProvider {
  const token = requiredToken(
    options.token,
    linodeTokenVariable,
    'Akamai (Linode) (a token with Linodes read access)',
  );
  const origin = options.origin ?? (process.env[linodeUrlVariable] || undefined);
  const api = new LinodeApi({
    token,
    ...(origin ? { origin } : {}),
    ...options.api,
    ...(options.cloudCalls ? { cloudCalls: options.cloudCalls } : {}),
  });
  const instances = new LinodeInstances(api, options.clusterName);
  const provider = clusterServerProvider({
    directory: instances,
    providerIds: linodeProviderIds,
    clusterName: options.clusterName,
    noun: 'Linode instance',
    clusterMark: `tag ${linodeClusterTagPrefix}${options.clusterName}`,
    groupMark: `${linodeGroupTagPrefix}<group> tag`,
    logger: options.logger,
    close: () => api.destroy(),
  });
  return { ...provider, instances };
}
