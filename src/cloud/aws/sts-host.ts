/**
 * The STS host an AWS identity proof is signed for and replayed to: the node's signer
 * (src/agent/aws-proof.ts) and the server's check (src/bootstrap/policies/aws.ts) must name the same.
 */
import { STSClient } from '@aws-sdk/client-sts';
import { ConfigError } from '../../errors.ts';
import { isAwsRegionName } from './region-name.ts';

const hosts = new Map<string, string>();

/**
 * The regional STS host a proof is signed for, in the region's partition (`amazonaws.com`, China's
 * `amazonaws.com.cn`, the ISO and sovereign partitions' own domains) and FIPS when asked: taken from
 * the STS SDK's own endpoint rules, as the SDKs a node signs with (nodeup's included) resolve it, and
 * as kops' verifier takes it from a presigned request of its SDK.
 */
export function stsHost(region: string, { fips = false }: { fips?: boolean } = {}): string {
  const key = `${region} ${fips}`;
  let host = hosts.get(key);
  if (host === undefined) {
    // The SDK would build a URL of whatever it is given (`x/y` gives host `sts.x`): a region is
    // checked first, and an SDK refusal is the configuration's error too.
    if (!isAwsRegionName(region))
      throw new ConfigError(`"${region.slice(0, 64)}" is not an AWS region such as us-east-1`);
    try {
      const { endpointProvider } = new STSClient({ region }).config;
      host = endpointProvider({
        Region: region,
        UseFIPS: fips,
        UseDualStack: false,
        UseGlobalEndpoint: false,
      }).url.host;
    } catch (err) {
      throw new ConfigError(`no STS endpoint for AWS region ${region}: ${(err as Error).message}`, {
        cause: err,
      });
    }
    hosts.set(key, host);
  }
  return host;
}

/**
 * Whether the environment asks for FIPS endpoints, as the Go SDK kops' nodeup signs with reads it:
 * `AWS_USE_FIPS_ENDPOINT` `true` in any case (aws-sdk-go-v2 compares with strings.EqualFold). (The
 * SDKs also read `use_fips_endpoint` from the shared config file; this does not.)
 */
export function fipsFromEnv(env: NodeJS.ProcessEnv = process.env): boolean {
  return env['AWS_USE_FIPS_ENDPOINT']?.toLowerCase() === 'true';
}
