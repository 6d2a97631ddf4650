/**
 * The kops AWS identity proof as it travels: a SigV4-signed STS GetCallerIdentity request for the
 * regional STS host, bound to the bootstrap request body by the signed `X-Kops-Request-Sha` header.
 * The node signs it (src/agent/aws-proof.ts); the server checks and replays it
 * (src/bootstrap/policies/aws-sts-proof.ts).
 */
import { createHash } from 'node:crypto';
import { STSClient } from '@aws-sdk/client-sts';

/** The well-known body of the v1 GetCallerIdentity POST. */
export const getCallerIdentityBody = 'Action=GetCallerIdentity&Version=2011-06-15';
/** The content type the SDKs send with the body. */
export const stsContentType = 'application/x-www-form-urlencoded; charset=utf-8';
/** How long a v2 presigned URL is valid (the controller enforces its own, shorter window). */
export const presignExpiresSeconds = 60;

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
    const { endpointProvider } = new STSClient({ region }).config;
    host = endpointProvider({ Region: region, UseFIPS: fips, UseDualStack: false, UseGlobalEndpoint: false })
      .url.host;
    hosts.set(key, host);
  }
  return host;
}

/** Whether the environment asks for FIPS endpoints, as the AWS SDKs read it (`AWS_USE_FIPS_ENDPOINT`). */
export function fipsFromEnv(env: NodeJS.ProcessEnv = process.env): boolean {
  return env['AWS_USE_FIPS_ENDPOINT']?.toLowerCase() === 'true';
}

/** `X-Kops-Request-Sha`: base64 (unpadded, as kops) of the SHA-256 of the bootstrap request body. */
export function kopsRequestSha(body: Uint8Array | string): string {
  return createHash('sha256').update(body).digest('base64').replace(/=+$/, '');
}
