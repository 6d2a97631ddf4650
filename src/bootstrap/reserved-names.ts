/**
 * Where the bootstrap server learns the names its node certificates must never carry
 * (src/pki/reserved-names.ts): the config (the cluster name, `bootstrap.apiServers`), the API server
 * the controller itself talks to, and the kops Cluster spec in the state store — the service range,
 * `clusterDNSDomain`, the public name and the additional SANs, which kOps puts in the API server's
 * certificate. Read once when the server starts; a Cluster that cannot be read leaves the
 * defaults for what it would have said (both common service ranges) and a warning, rather than no
 * bootstrap server.
 */
import { isIP } from 'node:net';
import type { KubeConfig } from '@kubernetes/client-node';
import type { Config } from '../config/schema.ts';
import { describeError } from '../errors.ts';
import { fieldsOf } from '../json-object.ts';
import { type Logger, silentLogger } from '../log.ts';
import { type ClusterApiNames, type ReservedNames, reservedNames } from '../pki/reserved-names.ts';
import { ClusterStore } from '../statestore/cluster-store.ts';
import type { Cluster } from '../statestore/kops-types.ts';
import { openVfs, type VfsOptions } from '../statestore/open.ts';

function text(value: unknown): string | undefined {
  return typeof value === 'string' && value ? value : undefined;
}

function texts(value: unknown): string[] {
  return Array.isArray(value) ? value.filter((v): v is string => typeof v === 'string' && v !== '') : [];
}

/**
 * The API server's names in a kops Cluster spec, in both API versions: v1alpha2's
 * `serviceClusterIPRange`, `masterPublicName`, `masterInternalName`, `additionalSans`; v1alpha3's
 * `networking.serviceClusterIPRange`, `api.publicName`, `api.additionalSANs`; `clusterDNSDomain` in both.
 */
export function clusterSpecApiNames(cluster: Cluster): ClusterApiNames {
  const spec = fieldsOf(cluster.spec);
  const api = fieldsOf(spec['api']);
  const networking = fieldsOf(spec['networking']);
  const range = text(spec['serviceClusterIPRange']) ?? text(networking['serviceClusterIPRange']);
  return {
    clusterName: cluster.metadata.name,
    ...(text(spec['clusterDNSDomain']) ? { clusterDomain: text(spec['clusterDNSDomain']) } : {}),
    ...(range ? { serviceClusterIPRanges: [range] } : {}),
    apiServerHosts: [
      text(spec['masterPublicName']),
      text(spec['masterInternalName']),
      text(api['publicName']),
      ...texts(spec['additionalSans']),
      ...texts(api['additionalSANs']),
    ].filter((host): host is string => host !== undefined),
  };
}

/** A URL's host, or undefined for a loopback one (it names every machine's own host, not the API server). */
function remoteHostOf(url: string): string | undefined {
  let host: string;
  try {
    host = new URL(url).hostname.replace(/^\[(.*)\]$/, '$1');
  } catch {
    return undefined;
  }
  const loopback = host === 'localhost' || (isIP(host) === 4 && host.startsWith('127.')) || host === '::1';
  return loopback ? undefined : host;
}

/** What the config, the API server URLs and (when read) the Cluster spec say. */
export function clusterApiNamesOf(
  config: Pick<Config, 'clusterName'>,
  sources: { apiServers?: readonly string[]; kubeApiServer?: string; cluster?: Cluster },
): ClusterApiNames {
  const fromSpec = sources.cluster ? clusterSpecApiNames(sources.cluster) : {};
  const urls = [...(sources.apiServers ?? []), ...(sources.kubeApiServer ? [sources.kubeApiServer] : [])];
  return {
    ...fromSpec,
    clusterName: config.clusterName,
    apiServerHosts: [
      ...(fromSpec.apiServerHosts ?? []),
      ...urls.map(remoteHostOf).filter((host): host is string => host !== undefined),
    ],
  };
}

/** What {@link loadReservedNames} needs besides the config. */
export interface ReservedNamesSources {
  /** The API server URLs nodes are told to use (`bootstrap.apiServers` or kops' default). */
  apiServers?: readonly string[];
  /** The controller's own kubeconfig: in a cluster, its server is the service IP. */
  kubeConfig?: KubeConfig;
  vfsOptions?: VfsOptions;
  logger?: Logger;
}

/** The reserved names of the cluster, the Cluster spec read from `configBase` when there is one. */
export async function loadReservedNames(
  config: Config,
  sources: ReservedNamesSources,
): Promise<ReservedNames> {
  const logger = sources.logger ?? silentLogger;
  let cluster: Cluster | undefined;
  if (config.configBase) {
    try {
      cluster = await new ClusterStore(openVfs(config.configBase, sources.vfsOptions), { logger }).cluster();
    } catch (err) {
      logger.warn(
        { err: describeError(err), configBase: config.configBase },
        'cannot read the kops Cluster: node certificates are kept off the default service ranges and known API names only',
      );
    }
  }
  const kubeApiServer = sources.kubeConfig?.getCurrentCluster()?.server;
  return reservedNames(
    clusterApiNamesOf(config, {
      ...(sources.apiServers ? { apiServers: sources.apiServers } : {}),
      ...(kubeApiServer ? { kubeApiServer } : {}),
      ...(cluster ? { cluster } : {}),
    }),
  );
}
