/**
 * The kops AWS identity proof as it travels: a SigV4-signed STS GetCallerIdentity request for the
 * regional STS host, bound to the bootstrap request body by the signed `X-Kops-Request-Sha` header.
 * The node signs it (src/agent/aws-proof.ts); the server checks and replays it
 * (src/bootstrap/policies/aws-sts-proof.ts); the STS host it is signed for is src/cloud/aws/sts-host.ts's. Pure.
 */
import { createHash } from 'node:crypto';

/** The well-known body of the v1 GetCallerIdentity POST. */
export const getCallerIdentityBody = 'Action=GetCallerIdentity&Version=2011-06-15';
/** The content type the SDKs send with the body. */
export const stsContentType = 'application/x-www-form-urlencoded; charset=utf-8';
/** How long a v2 presigned URL is valid (the controller enforces its own, shorter window). */
export const presignExpiresSeconds = 60;

/** `X-Kops-Request-Sha`: base64 (unpadded, as kops) of the SHA-256 of the bootstrap request body. */
export function kopsRequestSha(body: Uint8Array | string): string {
  return createHash('sha256').update(body).digest('base64').replace(/=+$/, '');
}
