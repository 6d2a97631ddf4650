/** Wires the Scaleway pieces for one cluster: the SDK clients, node identity and cloud groups. */
import { ConfigError, describeError } from '../../errors.ts';
import { type Logger, silentLogger } from '../../log.ts';
import type { CloudCallRecorder } from '../metrics.ts';
import type { CloudGroups, NodeIdentifier } from '../types.ts';
import {
  createScalewayClients,
  type ScalewayClients,
  type ScalewayCredentials,
  scalewayCredentialsFromEnv,
} from './client.ts';
import { ScalewayCloudGroups } from './cloud-groups.ts';
import { readScalewayMetadata } from './metadata.ts';
import { ScalewayNodeIdentifier } from './node-identifier.ts';

/** What the controller needs to know to talk to Scaleway. */
export interface ScalewayProviderOptions {
  clusterName: string;
  /**
   * Credentials, zone and API URL; default the `SCW_*` environment (scalewayCredentialsFromEnv), the
   * zone from `SCW_DEFAULT_ZONE` or else, as kops' verifier does, from this server's metadata.
   */
  credentials?: ScalewayCredentials;
  /** The metadata service's URL (default Scaleway's; the simulator's in tests). */
  metadataUrl?: string;
  logger?: Logger;
  /** Where the clients count their calls (the controller's CloudCallRecorder). */
  cloudCalls?: CloudCallRecorder;
}

/** The Scaleway implementations of the cloud interfaces, and the clients the verifier uses. */
export interface ScalewayProvider {
  clients: ScalewayClients;
  nodeIdentifier: NodeIdentifier;
  cloudGroups: CloudGroups;
  identifiesByNodeName: false;
  close(): void;
}

/** The zone when the environment names none: the one this controller's own server runs in. */
async function zoneOfThisServer(metadataUrl: string | undefined): Promise<string | undefined> {
  if (process.env['SCW_DEFAULT_ZONE']?.trim()) return undefined;
  try {
    return (await readScalewayMetadata(metadataUrl ? { url: metadataUrl } : {})).zone;
  } catch (err) {
    throw new ConfigError(
      `Scaleway: the zone is unknown: set SCW_DEFAULT_ZONE, or run on a Scaleway server (${describeError(err)})`,
      { cause: err },
    );
  }
}

/** Builds the provider; throws ConfigError when the `SCW_*` environment is incomplete. */
export async function createScalewayProvider(options: ScalewayProviderOptions): Promise<ScalewayProvider> {
  const credentials =
    options.credentials ??
    scalewayCredentialsFromEnv(process.env, await zoneOfThisServer(options.metadataUrl));
  const closed = new AbortController();
  const clients = createScalewayClients({
    credentials,
    signal: closed.signal,
    ...(options.cloudCalls ? { calls: options.cloudCalls } : {}),
  });
  return {
    clients,
    nodeIdentifier: new ScalewayNodeIdentifier({
      clients,
      clusterName: options.clusterName,
      logger: options.logger ?? silentLogger,
    }),
    cloudGroups: new ScalewayCloudGroups(clients),
    identifiesByNodeName: false,
    close: () => closed.abort(new DOMException('the Scaleway provider was closed', 'AbortError')),
  };
}
