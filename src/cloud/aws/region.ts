/**
 * The AWS region the controller works in, in the AWS SDKs' order: the configured one, else the
 * environment (`AWS_REGION`) or the shared config profile, else the one the instance metadata service
 * (IMDSv2) reports for the instance the controller runs on. IMDS is asked last, with a short timeout,
 * so a controller off EC2 fails fast with a clear message.
 */
import type { OutgoingHttpHeaders } from 'node:http';
import { STSClient } from '@aws-sdk/client-sts';
import { ConfigError } from '../../errors.ts';
import { httpsRequest } from '../../net/https-client.ts';
import { isAwsRegionName } from './region-name.ts';

/** Where IMDS is and how long to wait for it. */
export interface ImdsOptions {
  /** Default: `$AWS_EC2_METADATA_SERVICE_ENDPOINT`, else `http://169.254.169.254`. */
  endpoint?: string;
  /** Per request; default 1000 ms. */
  timeoutMs?: number;
}

/** IMDS answers a token or a region name: anything longer is not IMDS. */
const maxImdsAnswerBytes = 4096;

async function imdsRequest(
  url: string,
  init: { method?: string; headers: OutgoingHttpHeaders },
  timeoutMs: number,
): Promise<string> {
  const answer = await httpsRequest({
    url: new URL(url),
    ...init,
    timeoutMs,
    maxBodyBytes: maxImdsAnswerBytes,
  });
  if (answer.status < 200 || answer.status > 299) {
    throw new Error(`${init.method ?? 'GET'} ${url} answered HTTP ${answer.status}`);
  }
  return answer.body.toString('utf8').trim();
}

/** Asks IMDSv2 for the region of this instance. */
export async function regionFromImds(options: ImdsOptions = {}): Promise<string> {
  const base = (
    options.endpoint ??
    process.env['AWS_EC2_METADATA_SERVICE_ENDPOINT'] ??
    'http://169.254.169.254'
  ).replace(/\/+$/, '');
  const timeoutMs = options.timeoutMs ?? 1000;
  let region: string;
  try {
    const token = await imdsRequest(
      `${base}/latest/api/token`,
      { method: 'PUT', headers: { 'x-aws-ec2-metadata-token-ttl-seconds': '60' } },
      timeoutMs,
    );
    region = await imdsRequest(
      `${base}/latest/meta-data/placement/region`,
      { headers: { 'x-aws-ec2-metadata-token': token } },
      timeoutMs,
    );
  } catch (err) {
    throw new ConfigError(
      `could not learn the AWS region from the instance metadata service at ${base}: ` +
        `${(err as Error).message}; set server.provider.aws.Region in the configuration, or AWS_REGION`,
      { cause: err },
    );
  }
  if (!isAwsRegionName(region)) {
    throw new ConfigError(
      `the instance metadata service reported an invalid region "${region.slice(0, 64)}"`,
    );
  }
  return region;
}

/**
 * The region the SDK's own chain finds without IMDS: `AWS_REGION`, then the `region` of the profile
 * (`AWS_PROFILE`, else default) in the shared config file. A client's config resolves it, so the files
 * and variables are read exactly as the SDK reads them.
 */
export async function regionFromEnvironment(): Promise<string | undefined> {
  const client = new STSClient({});
  try {
    return await client.config.region();
  } catch {
    return undefined; // "Region is missing": neither is set
  } finally {
    client.destroy();
  }
}

function checked(region: string, source: string): string {
  if (!isAwsRegionName(region)) {
    throw new ConfigError(
      `"${region.slice(0, 64)}" (${source}) is not an AWS region name (such as us-east-1)`,
    );
  }
  return region;
}

/** The configured region if there is one, else the environment's or profile's, else the instance's from IMDS. */
export async function resolveRegion(configured: string | undefined, imds: ImdsOptions = {}): Promise<string> {
  if (configured !== undefined && configured !== '') return checked(configured, 'server.provider.aws.Region');
  const fromEnvironment = await regionFromEnvironment();
  if (fromEnvironment) return checked(fromEnvironment, 'AWS_REGION or the AWS profile');
  return regionFromImds(imds);
}
