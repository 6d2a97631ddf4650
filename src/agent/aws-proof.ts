/**
 * The node side of the kops AWS identity proof: a SigV4-signed STS GetCallerIdentity request, made
 * with the instance profile's credentials and bound to the bootstrap request body by the signed
 * `X-Kops-Request-Sha` header, produced in the two shapes nodeup sends (`x-aws-sts`, v1: the signed
 * headers; `x-aws-sts-v2`: a presigned URL). The node never calls STS itself; the controller does.
 */

import {
  canonicalRequest,
  computeSignature,
  formatAmzDate,
  type SigV4Credentials,
  signSigV4,
  sigV4Algorithm,
  uriEncode,
} from '../cloud/aws/sigv4.ts';
import { fipsFromEnv, stsHost } from '../cloud/aws/sts-host.ts';
import { bounded } from '../deadline.ts';
import { UnavailableError } from '../errors.ts';
import { printable } from '../log.ts';
import {
  getCallerIdentityBody,
  kopsRequestSha,
  presignExpiresSeconds,
  stsContentType,
} from '../protocol/aws-sts-proof.ts';
import type { ProofProvider } from './proofs.ts';

/** Options of {@link signAwsStsProof}. */
export interface AwsStsProofOptions {
  now?: Date;
  /** Sign for the region's FIPS STS endpoint (default: as the environment asks, `AWS_USE_FIPS_ENDPOINT`). */
  fips?: boolean;
}

/**
 * Signs the proof for `body` and returns the whole `Authorization` header value:
 * `x-aws-sts <base64 JSON of headers>` (v1) or `x-aws-sts-v2 <base64 JSON {url, method, headers}>` (v2).
 */
export function signAwsStsProof(
  body: Uint8Array | string,
  credentials: SigV4Credentials,
  region: string,
  version: 1 | 2,
  options: AwsStsProofOptions = {},
): string {
  const now = options.now ?? new Date();
  const host = stsHost(region, { fips: options.fips ?? fipsFromEnv() });
  const sha = kopsRequestSha(body);
  if (version === 1) {
    const headers = {
      host,
      'content-type': stsContentType,
      'content-length': String(Buffer.byteLength(getCallerIdentityBody)),
      'x-kops-request-sha': sha,
    };
    const signed = signSigV4(
      { method: 'POST', url: '/', headers, body: getCallerIdentityBody },
      credentials,
      {
        region,
        service: 'sts',
        now,
      },
    );
    // Go's http.Header shape, without Host (Go keeps it apart), as nodeup marshals it.
    const goHeaders: Record<string, string[]> = {
      Authorization: [signed['authorization'] as string],
      'Content-Length': [headers['content-length']],
      'Content-Type': [stsContentType],
      'X-Amz-Date': [signed['x-amz-date'] as string],
      'X-Kops-Request-Sha': [sha],
    };
    if (signed['x-amz-security-token']) goHeaders['X-Amz-Security-Token'] = [signed['x-amz-security-token']];
    return `x-aws-sts ${Buffer.from(JSON.stringify(goHeaders)).toString('base64')}`;
  }
  const amzDate = formatAmzDate(now);
  const scope = { accessKeyId: credentials.accessKeyId, date: amzDate.slice(0, 8), region, service: 'sts' };
  const signedHeaders = ['host', 'x-kops-request-sha'];
  const query: [string, string][] = [
    ['Action', 'GetCallerIdentity'],
    ['Version', '2011-06-15'],
    ['X-Amz-Algorithm', sigV4Algorithm],
    ['X-Amz-Credential', `${credentials.accessKeyId}/${scope.date}/${region}/sts/aws4_request`],
    ['X-Amz-Date', amzDate],
    ['X-Amz-Expires', String(presignExpiresSeconds)],
    ...(credentials.sessionToken
      ? [['X-Amz-Security-Token', credentials.sessionToken] as [string, string]]
      : []),
    ['X-Amz-SignedHeaders', signedHeaders.join(';')],
  ];
  const path = `/?${query.map(([k, v]) => `${uriEncode(k)}=${uriEncode(v)}`).join('&')}`;
  const canonical = canonicalRequest(
    { method: 'GET', url: path, headers: { host, 'x-kops-request-sha': sha }, body: '' },
    signedHeaders,
    true,
  );
  const signature = computeSignature(canonical, amzDate, scope, credentials.secretAccessKey);
  const token = {
    url: `https://${host}${path}&X-Amz-Signature=${signature}`,
    method: 'GET',
    headers: { 'X-Kops-Request-Sha': [sha] },
  };
  return `x-aws-sts-v2 ${Buffer.from(JSON.stringify(token)).toString('base64')}`;
}

/**
 * How long one attempt waits for the credentials. The SDK's IMDS reads have only an idle timeout
 * (1 s without a byte) and no bound on the body, so an answer that trickles would hold the attempt,
 * and with it the whole join, for ever; past this the attempt is a fault and is retried.
 */
const credentialsTimeoutMs = 30_000;

/**
 * The proof of each attempt, signed with the credentials `credentials` loads at that moment (the
 * SDK's chain: on an instance, the instance profile's from IMDS). Credentials that cannot be loaded
 * yet (IMDS not answering at boot, the profile not attached yet) are a fault that may pass:
 * UnavailableError, retried until --timeout like any other, never an internal error.
 */
export function awsStsProof(
  credentials: () => Promise<SigV4Credentials>,
  region: string,
  version: 1 | 2,
  options: { timeoutMs?: number } = {},
): ProofProvider {
  const timeoutMs = options.timeoutMs ?? credentialsTimeoutMs;
  return async (body, signal) => {
    let loaded: SigV4Credentials;
    try {
      loaded = await bounded(
        () => credentials(),
        timeoutMs,
        "the instance profile's AWS credentials",
        signal,
      );
    } catch (err) {
      throw new UnavailableError(
        `cannot load the instance profile's AWS credentials: ${printable((err as Error).message)}`,
        { cause: err },
      );
    }
    return signAwsStsProof(body, loaded, region, version);
  };
}
