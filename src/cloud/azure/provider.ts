/**
 * Wires the Azure pieces for one cluster: the ARM client (scoped, as kops' is, to the subscription
 * and resource group IMDS reports for the controller's own VM unless configured), node identity
 * and cloud groups. Credentials: DefaultAzureCredential (the VM's managed identity on Azure,
 * `AZURE_CLIENT_ID`/`AZURE_TENANT_ID`/`AZURE_CLIENT_SECRET` or workload identity elsewhere, and the
 * Azure SDK's own variables that move or narrow it). ARM's endpoint: `AZURE_RESOURCE_MANAGER_ENDPOINT`
 * when set (e.g. the simulator), else the public cloud's.
 */
import type { TokenCredential } from '@azure/identity';
import { ConfigError, describeError } from '../../errors.ts';
import { type Logger, silentLogger } from '../../log.ts';
import type { CloudCallRecorder } from '../metrics.ts';
import { AzureClient } from './client.ts';
import { AzureCloudGroups } from './cloud-groups.ts';
import { azureCredential } from './egress.ts';
import { imdsInstance } from './imds.ts';
import { AzureNodeIdentifier } from './node-identifier.ts';

/** The variable that replaces ARM's endpoint, as Azure's tools and operators spell it. */
export const azureEndpointVariable = 'AZURE_RESOURCE_MANAGER_ENDPOINT';

/** What the controller needs to know to talk to Azure. */
export interface AzureProviderOptions {
  clusterName: string;
  /** Default: IMDS's `subscriptionId` for the controller's VM. */
  subscriptionId?: string;
  /** Default: IMDS's `resourceGroupName` for the controller's VM. */
  resourceGroup?: string;
  /** Default: DefaultAzureCredential, its requests through the egress proxy (./egress.ts). */
  credential?: TokenCredential;
  /** ARM's base URL (default `AZURE_RESOURCE_MANAGER_ENDPOINT`, then the public cloud's). */
  endpoint?: string;
  /** Extra CA certificates (PEM) trusted for ARM's TLS (a simulator's). */
  caPem?: string;
  /** IMDS base URL (default http://169.254.169.254). */
  imdsUrl?: string;
  logger?: Logger;
  cloudCalls?: CloudCallRecorder;
}

/** The Azure implementations of the cloud interfaces. */
export interface AzureProvider {
  client: AzureClient;
  nodeIdentifier: AzureNodeIdentifier;
  cloudGroups: AzureCloudGroups;
  identifiesByNodeName: false;
  close(): void;
}

/** Builds the Azure provider; ConfigError when neither configuration nor IMDS names the scope. */
export async function createAzureProvider(options: AzureProviderOptions): Promise<AzureProvider> {
  let { subscriptionId, resourceGroup } = options;
  if (!subscriptionId || !resourceGroup) {
    const instance = await imdsInstance(options.imdsUrl ? { url: options.imdsUrl } : {}).catch(
      (err: unknown) => {
        throw new ConfigError(
          `the Azure subscription and resource group are not configured and IMDS cannot say: ${describeError(err)}`,
          { cause: err },
        );
      },
    );
    subscriptionId ??= instance.subscriptionId;
    resourceGroup ??= instance.resourceGroupName;
  }
  const logger = options.logger ?? silentLogger;
  const endpoint = options.endpoint ?? process.env[azureEndpointVariable];
  const client = new AzureClient({
    subscriptionId,
    resourceGroup,
    credential: options.credential ?? azureCredential(),
    ...(endpoint ? { endpoint } : {}),
    ...(options.caPem ? { caPem: options.caPem } : {}),
    ...(options.cloudCalls ? { cloudCalls: options.cloudCalls } : {}),
  });
  return {
    client,
    nodeIdentifier: new AzureNodeIdentifier({ client, clusterName: options.clusterName, logger }),
    cloudGroups: new AzureCloudGroups({ client, logger }),
    identifiesByNodeName: false,
    close: () => client.close(),
  };
}
