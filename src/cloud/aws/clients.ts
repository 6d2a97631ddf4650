/**
 * The AWS SDK clients the controller uses, configured once: the region (configured or from IMDS),
 * adaptive retries (the SDK's client-side rate limiter backs off when EC2 answers
 * `RequestLimitExceeded`), and an endpoint override for the simulator or a VPC endpoint.
 */
import { AutoScalingClient } from '@aws-sdk/client-auto-scaling';
import { EC2Client } from '@aws-sdk/client-ec2';
import { STSClient } from '@aws-sdk/client-sts';
import { type ImdsOptions, resolveRegion } from './region.ts';
import type { SigV4Credentials } from './sigv4.ts';

/** How to build the clients. */
export interface AwsClientOptions {
  /** The region; when absent it comes from IMDS. */
  region?: string;
  /** One endpoint for every service (the simulator); default: the services' public endpoints. */
  endpoint?: string;
  /** Static credentials; default: the SDK's chain (environment, instance profile, …). */
  credentials?: SigV4Credentials;
  /** Attempts per call including retries (default 8, so throttling is ridden out, not surfaced). */
  maxAttempts?: number;
  imds?: ImdsOptions;
}

/** The clients, sharing one configuration. */
export interface AwsClients {
  region: string;
  ec2: EC2Client;
  autoscaling: AutoScalingClient;
  sts: STSClient;
  /** Closes the clients' connections. */
  destroy(): void;
}

/** Builds the EC2, Auto Scaling and STS clients. */
export async function createAwsClients(options: AwsClientOptions = {}): Promise<AwsClients> {
  const region = await resolveRegion(options.region, options.imds);
  const config = {
    region,
    retryMode: 'adaptive',
    maxAttempts: options.maxAttempts ?? 8,
    ...(options.endpoint === undefined ? {} : { endpoint: options.endpoint }),
    ...(options.credentials === undefined ? {} : { credentials: options.credentials }),
  };
  const ec2 = new EC2Client(config);
  const autoscaling = new AutoScalingClient(config);
  const sts = new STSClient(config);
  return {
    region,
    ec2,
    autoscaling,
    sts,
    destroy() {
      ec2.destroy();
      autoscaling.destroy();
      sts.destroy();
    },
  };
}
