/** Wires the AWS pieces for one cluster: the SDK clients, node identity and cloud groups. */
import { type Logger, silentLogger } from '../../log.ts';
import { type AwsClientOptions, type AwsClients, createAwsClients } from './clients.ts';
import { AwsCloudGroups } from './groups.ts';
import { AwsNodeIdentifier } from './identify.ts';

/** What the controller needs to know to talk to AWS. */
export interface AwsProviderOptions extends AwsClientOptions {
  clusterName: string;
  logger?: Logger;
}

/** The AWS implementations of the cloud interfaces, and the clients behind them. */
export interface AwsProvider {
  clients: AwsClients;
  nodeIdentifier: AwsNodeIdentifier;
  cloudGroups: AwsCloudGroups;
}

/**
 * Builds the AWS provider. The region is `options.region` (`server.provider.aws.Region`) or, when
 * absent, the instance's from IMDS; throws ConfigError when neither is available.
 */
export async function createAwsProvider(options: AwsProviderOptions): Promise<AwsProvider> {
  const logger = options.logger ?? silentLogger;
  const clients = await createAwsClients(options);
  logger.info({ region: clients.region }, 'AWS provider ready');
  return {
    clients,
    nodeIdentifier: new AwsNodeIdentifier({ ec2: clients.ec2, clusterName: options.clusterName, logger }),
    cloudGroups: new AwsCloudGroups({ autoscaling: clients.autoscaling, ec2: clients.ec2, logger }),
  };
}
