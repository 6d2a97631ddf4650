/**
 * Verifying AWS Signature Version 4 the way AWS front-ends do: the simulated EC2, Auto Scaling, STS
 * and S3 endpoints check every request with it, so a client that signs wrongly fails here as it would
 * against AWS. The product never verifies a signature itself (STS does, for the bootstrap `aws`
 * policy), which is why this lives on the simulator's side.
 */
import { timingSafeEqual } from 'node:crypto';
import {
  canonicalRequest,
  computeSignature,
  formatAmzDate,
  headerValue,
  parseAmzDate,
  parseSigV4,
  type SigV4Claims,
  SigV4Error,
  type SigV4Request,
  type SigV4Secret,
  sha256Hex,
} from '../../cloud/aws/sigv4.ts';

/** How far a request's date may be from the verifier's clock: AWS allows 15 minutes either way. */
export const maxSigV4SkewMs = 15 * 60 * 1000;

/** What a verifier needs: the secret behind an access key, its clock, and the scope it serves. */
export interface SigV4VerifyOptions {
  lookupSecret: (accessKeyId: string) => SigV4Secret | undefined;
  now?: () => Date;
  /** When set, a request scoped to another region or service is rejected. */
  region?: string;
  service?: string;
}

/**
 * Verifies a request's SigV4 signature: the access key must be known, the session token must match,
 * `host` must be signed, the date must be within 15 minutes (or the presigned URL unexpired) and the
 * signature must be the one the secret key yields. Returns the verified claims.
 */
export function verifySigV4(request: SigV4Request, options: SigV4VerifyOptions): SigV4Claims {
  const claims = parseSigV4(request);
  const { scope } = claims;
  if (!claims.signedHeaders.includes('host')) {
    throw new SigV4Error('SignatureDoesNotMatch', "the 'Host' header must be among the signed headers");
  }
  for (const name of claims.signedHeaders) {
    if (request.headers[name] === undefined) {
      throw new SigV4Error(
        'SignatureDoesNotMatch',
        `the signed header '${name}' is missing from the request`,
      );
    }
  }
  if (options.region !== undefined && scope.region !== options.region) {
    throw new SigV4Error(
      'SignatureDoesNotMatch',
      `Credential should be scoped to a valid region, not '${scope.region}'.`,
    );
  }
  if (options.service !== undefined && scope.service !== options.service) {
    throw new SigV4Error(
      'SignatureDoesNotMatch',
      `Credential should be scoped to correct service: '${options.service}'.`,
    );
  }
  const signedAt = parseAmzDate(claims.amzDate);
  if (signedAt === undefined) {
    throw new SigV4Error(
      'IncompleteSignature',
      `the date "${claims.amzDate}" is not of the form YYYYMMDDTHHMMSSZ`,
    );
  }
  if (!claims.amzDate.startsWith(scope.date)) {
    throw new SigV4Error(
      'SignatureDoesNotMatch',
      `Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '${scope.date}' != '${claims.amzDate.slice(0, 8)}'`,
    );
  }
  checkFreshness(claims, signedAt, (options.now ?? (() => new Date()))());
  // The body is bound only through its hash: a declared hash must be the real one, or a signature
  // could be replayed with another body. (Unsigned payloads are an S3 feature these services lack.)
  const declaredHash = headerValue(request, 'x-amz-content-sha256');
  if (declaredHash !== undefined && declaredHash !== sha256Hex(request.body)) {
    throw new SigV4Error(
      'SignatureDoesNotMatch',
      'The provided x-amz-content-sha256 header does not match what was computed.',
    );
  }
  const secret = options.lookupSecret(scope.accessKeyId);
  if (secret === undefined) {
    throw new SigV4Error('InvalidClientTokenId', 'The security token included in the request is invalid.');
  }
  if ((secret.sessionToken ?? '') !== (claims.securityToken ?? '')) {
    throw new SigV4Error('InvalidClientTokenId', 'The security token included in the request is invalid.');
  }
  const expected = computeSignature(
    canonicalRequest(request, claims.signedHeaders, claims.presigned),
    claims.amzDate,
    scope,
    secret.secretAccessKey,
  );
  const given = Buffer.from(claims.signature, 'utf8');
  const wanted = Buffer.from(expected, 'utf8');
  if (given.length !== wanted.length || !timingSafeEqual(given, wanted)) {
    throw new SigV4Error(
      'SignatureDoesNotMatch',
      'The request signature we calculated does not match the signature you provided. ' +
        'Check your AWS Secret Access Key and signing method.',
    );
  }
  return claims;
}

function checkFreshness(claims: SigV4Claims, signedAt: Date, now: Date): void {
  const stamp = formatAmzDate(now);
  if (claims.presigned) {
    const expires = claims.expiresSeconds ?? 900;
    if (!Number.isInteger(expires) || expires < 1 || expires > 604_800) {
      throw new SigV4Error('IncompleteSignature', 'X-Amz-Expires must be between 1 and 604800 seconds');
    }
    if (now.getTime() > signedAt.getTime() + expires * 1000) {
      throw new SigV4Error(
        'SignatureDoesNotMatch',
        `Signature expired: ${claims.amzDate} is now earlier than ${stamp}`,
        true,
      );
    }
    if (signedAt.getTime() - now.getTime() > maxSigV4SkewMs) {
      throw new SigV4Error(
        'SignatureDoesNotMatch',
        `Signature not yet current: ${claims.amzDate} is still later than ${stamp}`,
        true,
      );
    }
    return;
  }
  const earliest = formatAmzDate(new Date(now.getTime() - maxSigV4SkewMs));
  const latest = formatAmzDate(new Date(now.getTime() + maxSigV4SkewMs));
  if (now.getTime() - signedAt.getTime() > maxSigV4SkewMs) {
    throw new SigV4Error(
      'SignatureDoesNotMatch',
      `Signature expired: ${claims.amzDate} is now earlier than ${earliest} (${stamp} - 15 min.)`,
      true,
    );
  }
  if (signedAt.getTime() - now.getTime() > maxSigV4SkewMs) {
    throw new SigV4Error(
      'SignatureDoesNotMatch',
      `Signature not yet current: ${claims.amzDate} is still later than ${latest} (${stamp} + 15 min.)`,
      true,
    );
  }
}
