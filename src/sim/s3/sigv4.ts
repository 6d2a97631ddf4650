/**
 * Verification of AWS Signature Version 4 on requests to the simulated S3, so that a client with a
 * wrong key, a stale date or an altered signed header is refused as the real service refuses it.
 * Only header-based signing (the `Authorization` header the SDK sends) is supported.
 */
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';

/** An access key the simulator accepts. */
export interface SimCredentials {
  accessKeyId: string;
  secretAccessKey: string;
}

/** The request facts a signature covers. */
export interface SignedRequest {
  method: string;
  /** The raw request target, path and query exactly as received. */
  rawUrl: string;
  headers: IncomingHttpHeaders;
}

/** Why a signature was refused, as the S3 error code and message. */
export interface SignatureFailure {
  code: 'AccessDenied' | 'InvalidAccessKeyId' | 'SignatureDoesNotMatch' | 'RequestTimeTooSkewed';
  message: string;
}

const maxSkewMs = 15 * 60 * 1000;
const authPattern =
  /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/([^/]+)\/aws4_request, ?SignedHeaders=([a-z0-9;-]+), ?Signature=([0-9a-f]{64})$/;

/** RFC 3986 encoding as SigV4 wants it (encodeURIComponent leaves `!'()*` alone). */
function rfc3986(value: string): string {
  return encodeURIComponent(value).replace(
    /[!'()*]/g,
    (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`,
  );
}

function canonicalQuery(query: string): string {
  if (query === '') return '';
  return query
    .split('&')
    .filter((pair) => pair !== '')
    .map((pair) => {
      const eq = pair.indexOf('=');
      const key = decodeURIComponent(eq < 0 ? pair : pair.slice(0, eq));
      const value = eq < 0 ? '' : decodeURIComponent(pair.slice(eq + 1).replace(/\+/g, '%20'));
      return [rfc3986(key), rfc3986(value)] as const;
    })
    .sort(([ak, av], [bk, bv]) => (ak === bk ? (av < bv ? -1 : 1) : ak < bk ? -1 : 1))
    .map(([k, v]) => `${k}=${v}`)
    .join('&');
}

function headerValue(headers: IncomingHttpHeaders, name: string): string | undefined {
  const value = headers[name];
  if (value === undefined) return undefined;
  return (Array.isArray(value) ? value.join(',') : value).trim().replace(/\s+/g, ' ');
}

const hmac = (key: Buffer | string, data: string) => createHmac('sha256', key).update(data).digest();

/** Parses the `x-amz-date` basic ISO 8601 form (`20260101T000000Z`) into epoch milliseconds. */
function parseAmzDate(value: string): number {
  const m = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(value);
  if (!m) return Number.NaN;
  return Date.UTC(+m[1]!, +m[2]! - 1, +m[3]!, +m[4]!, +m[5]!, +m[6]!);
}

/** Checks a request's SigV4 signature; returns undefined when it is valid. */
export function verifySigV4(
  request: SignedRequest,
  keys: readonly SimCredentials[],
  now: number = Date.now(),
): SignatureFailure | undefined {
  const authorization = headerValue(request.headers, 'authorization');
  if (!authorization) return { code: 'AccessDenied', message: 'Anonymous access is forbidden' };
  const parsed = authPattern.exec(authorization);
  if (!parsed) return { code: 'AccessDenied', message: 'Unsupported or malformed Authorization header' };
  const [, accessKeyId, day, region, service, signedHeaderList, signature] = parsed as unknown as string[];
  const key = keys.find((k) => k.accessKeyId === accessKeyId);
  if (!key) {
    return {
      code: 'InvalidAccessKeyId',
      message: 'The AWS Access Key Id you provided does not exist in our records.',
    };
  }
  const amzDate = headerValue(request.headers, 'x-amz-date') ?? '';
  const signedAt = parseAmzDate(amzDate);
  if (Number.isNaN(signedAt) || !amzDate.startsWith(day!)) {
    return { code: 'AccessDenied', message: 'x-amz-date is missing or does not match the credential scope' };
  }
  if (Math.abs(now - signedAt) > maxSkewMs) {
    return {
      code: 'RequestTimeTooSkewed',
      message: 'The difference between the request time and the current time is too large.',
    };
  }
  const signedHeaders = signedHeaderList!.split(';');
  if (!signedHeaders.includes('host')) {
    return { code: 'AccessDenied', message: 'the host header must be signed' };
  }
  const queryAt = request.rawUrl.indexOf('?');
  const path = queryAt < 0 ? request.rawUrl : request.rawUrl.slice(0, queryAt);
  const query = queryAt < 0 ? '' : request.rawUrl.slice(queryAt + 1);
  const canonicalRequest = [
    request.method,
    path,
    canonicalQuery(query),
    ...signedHeaders.map((h) => `${h}:${headerValue(request.headers, h) ?? ''}`),
    '',
    signedHeaderList,
    headerValue(request.headers, 'x-amz-content-sha256') ?? 'UNSIGNED-PAYLOAD',
  ].join('\n');
  const scope = `${day}/${region}/${service}/aws4_request`;
  const stringToSign = [
    'AWS4-HMAC-SHA256',
    amzDate,
    scope,
    createHash('sha256').update(canonicalRequest).digest('hex'),
  ].join('\n');
  const signingKey = hmac(
    hmac(hmac(hmac(`AWS4${key.secretAccessKey}`, day!), region!), service!),
    'aws4_request',
  );
  const expected = hmac(signingKey, stringToSign);
  if (!timingSafeEqual(expected, Buffer.from(signature!, 'hex'))) {
    return {
      code: 'SignatureDoesNotMatch',
      message: 'The request signature we calculated does not match the signature you provided.',
    };
  }
  return undefined;
}
