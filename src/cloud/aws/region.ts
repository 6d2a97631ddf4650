/**
 * The AWS region the controller works in: the configured one, else the one the instance metadata
 * service (IMDSv2) reports for the instance the controller runs on. IMDS is asked only when no region
 * is configured, with a short timeout, so a controller off EC2 fails fast with a clear message.
 */
import { ConfigError } from '../../errors.ts';

/** Where IMDS is and how long to wait for it. */
export interface ImdsOptions {
  /** Default: `$AWS_EC2_METADATA_SERVICE_ENDPOINT`, else `http://169.254.169.254`. */
  endpoint?: string;
  /** Per request; default 1000 ms. */
  timeoutMs?: number;
}

const regionPattern = /^[a-z]{2}(?:-[a-z]+)+-\d+$/;

async function imdsRequest(url: string, init: RequestInit, timeoutMs: number): Promise<string> {
  const response = await fetch(url, { ...init, signal: AbortSignal.timeout(timeoutMs), redirect: 'error' });
  const text = await response.text();
  if (!response.ok) throw new Error(`${init.method ?? 'GET'} ${url} answered HTTP ${response.status}`);
  return text.trim();
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
        `${(err as Error).message}; set server.provider.aws.Region in the configuration`,
      { cause: err },
    );
  }
  if (!regionPattern.test(region)) {
    throw new ConfigError(
      `the instance metadata service reported an invalid region "${region.slice(0, 64)}"`,
    );
  }
  return region;
}

/** The configured region if there is one, else the instance's region from IMDS. */
export async function resolveRegion(configured: string | undefined, imds: ImdsOptions = {}): Promise<string> {
  if (configured !== undefined && configured !== '') {
    if (!regionPattern.test(configured)) {
      throw new ConfigError(`"${configured}" is not an AWS region name (such as us-east-1)`);
    }
    return configured;
  }
  return regionFromImds(imds);
}
