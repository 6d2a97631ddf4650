/** Builds the cloud provider a controller config names. */
import type { AuthClient } from 'google-auth-library';
import type { Config } from '../config/schema.ts';
import { ConfigError } from '../errors.ts';
import { type Logger, silentLogger } from '../log.ts';
import type { Vfs } from '../statestore/types.ts';
import type { AwsClientOptions } from './aws/clients.ts';
import type { AzureProviderOptions } from './azure/provider.ts';
import { InventoryStore } from './metal/inventory.ts';
import { MetalCloudGroups, MetalNodeIdentifier } from './metal/node-identifier.ts';
import { type CloudCallRecorder, noCloudCalls } from './metrics.ts';
import type { OpenStackAuthOptions } from './openstack/auth.ts';
import type { ScalewayCredentials } from './scaleway/client.ts';
import type { CloudGroups, NodeIdentifier } from './types.ts';

/** Overrides for the simulator and tests; production leaves them unset and uses the cloud's defaults. */
export interface CloudOverrides {
  /** Endpoint and credentials for the AWS clients (default: the SDK's endpoint and credential chain). */
  aws?: Pick<AwsClientOptions, 'endpoint' | 'credentials'>;
  /** Compute endpoint and credentials for GCE (default: the public API, Application Default Credentials). */
  gce?: { endpoint?: string; auth?: Pick<AuthClient, 'request'> };
  /** ARM endpoint, its CA, the credential and IMDS (default: public Azure, DefaultAzureCredential). */
  azure?: Pick<AzureProviderOptions, 'endpoint' | 'caPem' | 'credential' | 'imdsUrl'>;
  /** API endpoint and token (default: the public API, `HCLOUD_TOKEN`). */
  hetzner?: { endpoint?: string; token?: string };
  /** API endpoint and token (default: the public API, `DIGITALOCEAN_ACCESS_TOKEN`). */
  digitalocean?: { endpoint?: string; token?: string };
  /** API origin and token (default: the public API, `LINODE_TOKEN`). */
  linode?: { origin?: string; token?: string };
  /** Keystone URL, region and credentials (default: the `OS_*` environment). */
  openstack?: { auth?: OpenStackAuthOptions };
  /** Credentials, zone and API URL (default: the `SCW_*` environment), and the metadata URL. */
  scaleway?: { credentials?: ScalewayCredentials; metadataUrl?: string };
}

/** A cloud provider, as the controllers use it. */
export interface CloudProvider {
  nodeIdentifier: NodeIdentifier;
  cloudGroups: CloudGroups;
  /** Whether nodes without a providerID are identified by name (metal inventories list host names). */
  identifiesByNodeName: boolean;
  /** Releases the provider's connections. */
  close(): void;
}

/**
 * The provider of `config.cloud`. `stateStore` is the cluster's configBase (the metal inventory lives
 * there; only metal needs it). `cloudCalls` counts the cloud clients' calls (the controller passes its metrics; one-shot
 * commands count nothing). Throws ConfigError when the cloud's credentials or scope are missing.
 */
export async function cloudFromConfig(
  config: Pick<Config, 'cloud' | 'clusterName' | 'server'>,
  stateStore: Vfs | undefined,
  overrides: CloudOverrides = {},
  logger: Logger = silentLogger,
  cloudCalls: CloudCallRecorder = noCloudCalls,
): Promise<CloudProvider> {
  switch (config.cloud) {
    case 'aws': {
      const region = config.server?.provider.aws?.Region;
      const { createAwsProvider } = await import('./aws/provider.ts');
      const aws = await createAwsProvider({
        clusterName: config.clusterName,
        ...(region ? { region } : {}),
        ...overrides.aws,
        logger,
        cloudCalls,
      });
      return {
        nodeIdentifier: aws.nodeIdentifier,
        cloudGroups: aws.cloudGroups,
        identifiesByNodeName: false,
        close: () => aws.clients.destroy(),
      };
    }
    case 'gce': {
      const { createGceProvider } = await import('./gce/provider.ts');
      const gce = await createGceProvider({
        project: config.server?.provider.gce?.projectID,
        clusterName: config.server?.provider.gce?.clusterName ?? config.clusterName,
        ...overrides.gce,
        logger,
        cloudCalls,
      });
      return {
        nodeIdentifier: gce.nodeIdentifier,
        cloudGroups: gce.cloudGroups,
        identifiesByNodeName: false,
        close: () => gce.close(),
      };
    }
    case 'openstack':
      return (await import('./openstack/provider.ts')).createOpenStackProvider({
        clusterName: config.clusterName,
        ...overrides.openstack,
        logger,
        cloudCalls,
      });
    case 'scaleway':
      return (await import('./scaleway/provider.ts')).createScalewayProvider({
        clusterName: config.clusterName,
        ...overrides.scaleway,
        logger,
        cloudCalls,
      });
    case 'azure':
      return (await import('./azure/provider.ts')).createAzureProvider({
        ...azureScopeOf(config),
        ...overrides.azure,
        logger,
        cloudCalls,
      });
    case 'hetzner':
      return (await import('./hetzner/provider.ts')).createHetznerProvider({
        clusterName: config.clusterName,
        ...overrides.hetzner,
        logger,
        cloudCalls,
      });
    case 'digitalocean':
      return (await import('./digitalocean/provider.ts')).createDigitalOceanProvider({
        clusterName: config.clusterName,
        ...overrides.digitalocean,
        logger,
        cloudCalls,
      });
    case 'linode':
      return (await import('./linode/provider.ts')).createLinodeProvider({
        clusterName: config.clusterName,
        ...overrides.linode,
        logger,
        cloudCalls,
      });
    case 'metal': {
      if (!stateStore) throw new ConfigError('the metal inventory lives in the state store: set configBase');
      const inventory = new InventoryStore({ vfs: stateStore, logger });
      return {
        nodeIdentifier: new MetalNodeIdentifier(inventory),
        cloudGroups: new MetalCloudGroups(inventory),
        identifiesByNodeName: true,
        close: () => undefined,
      };
    }
  }
}

/** The Azure scope the configuration names: cluster name, subscription and resource group (else IMDS's). */
export function azureScopeOf(
  config: Pick<Config, 'clusterName' | 'server'>,
): Pick<AzureProviderOptions, 'clusterName' | 'subscriptionId' | 'resourceGroup'> {
  const azure = config.server?.provider.azure;
  return {
    clusterName: azure?.clusterName ?? config.clusterName,
    ...(azure?.subscriptionID ? { subscriptionId: azure.subscriptionID } : {}),
    ...(azure?.resourceGroup ? { resourceGroup: azure.resourceGroup } : {}),
  };
}
