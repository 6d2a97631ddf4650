/**
 * AWS Signature Version 4: parsing a signed request and computing its signature. A joining node signs
 * its STS proof with it, and the bootstrap `aws` policy uses the parser to check what a node's signed
 * request covers before replaying it to STS (which verifies the signature itself). Verifying
 * signatures the way AWS front-ends do is the simulator's job: src/sim/aws/sigv4-verify.ts.
 */

import { createHash, createHmac } from 'node:crypto';
import { UnauthenticatedError } from '../../errors.ts';
import { quoted } from '../../quote.ts';

export const sigV4Algorithm = 'AWS4-HMAC-SHA256';

/** An HTTP request as it arrived: `url` is the path and query exactly as on the wire. */
export interface SigV4Request {
  method: string;
  url: string;
  /** Header names in lower case; repeated headers as arrays. */
  headers: Readonly<Record<string, string | readonly string[] | undefined>>;
  body: Uint8Array | string;
}

/** The credential scope a request was signed for. */
export interface SigV4Scope {
  accessKeyId: string;
  /** `YYYYMMDD`. */
  date: string;
  region: string;
  service: string;
}

/** What a request's signature claims, read from the Authorization header or the presigned query. */
export interface SigV4Claims {
  scope: SigV4Scope;
  /** Lower-case names, in the order given. */
  signedHeaders: string[];
  signature: string;
  /** `YYYYMMDDTHHMMSSZ`. */
  amzDate: string;
  /** True for a presigned URL (signature in the query string). */
  presigned: boolean;
  /** X-Amz-Expires of a presigned URL, in seconds. */
  expiresSeconds?: number;
  securityToken?: string;
}

/** The AWS error code a verification failure corresponds to, as AWS services name it. */
export type SigV4ErrorCode =
  | 'MissingAuthenticationToken'
  | 'IncompleteSignature'
  | 'InvalidClientTokenId'
  | 'SignatureDoesNotMatch'
  | 'RequestExpired';

/** A request whose signature is missing, malformed or wrong; `awsCode` says which, as AWS does. */
export class SigV4Error extends UnauthenticatedError {
  readonly awsCode: SigV4ErrorCode;
  /** True when only the date was wrong (too old, too new, or past a presigned URL's expiry). */
  readonly expired: boolean;

  constructor(awsCode: SigV4ErrorCode, message: string, expired = false) {
    super(message, { details: { awsCode } });
    this.awsCode = awsCode;
    this.expired = expired;
  }
}

/** The secret half of a credential, and the session token it must come with (temporary credentials). */
export interface SigV4Secret {
  secretAccessKey: string;
  sessionToken?: string;
}

/** The key pair a request is signed with. */
export interface SigV4Credentials extends SigV4Secret {
  accessKeyId: string;
}

/** RFC 3986 percent-encoding, as SigV4 requires (encodeURIComponent leaves `!'()*` alone). */
export function uriEncode(value: string): string {
  return encodeURIComponent(value).replace(
    /[!'()*]/g,
    (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`,
  );
}

/** The hex SHA-256 of a payload, as SigV4 hashes bodies. */
export function sha256Hex(data: Uint8Array | string): string {
  return createHash('sha256').update(data).digest('hex');
}

function hmac(key: Uint8Array | string, data: string): Buffer {
  return createHmac('sha256', key).update(data).digest();
}

function safeDecode(value: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    throw new SigV4Error('IncompleteSignature', `the request URL has an invalid percent-encoding: ${value}`);
  }
}

function splitUrl(url: string): { path: string; query: string } {
  const q = url.indexOf('?');
  return q < 0 ? { path: url, query: '' } : { path: url.slice(0, q), query: url.slice(q + 1) };
}

/** Query parameters decoded, in order, duplicates kept. */
function queryPairs(query: string): [string, string][] {
  if (query === '') return [];
  return query
    .split('&')
    .filter((part) => part !== '')
    .map((part) => {
      const eq = part.indexOf('=');
      return eq < 0
        ? [safeDecode(part), '']
        : [safeDecode(part.slice(0, eq)), safeDecode(part.slice(eq + 1))];
    });
}

/** A header's value, repeated headers joined with commas as SigV4 canonicalises them. */
export function headerValue(request: SigV4Request, name: string): string | undefined {
  const value = request.headers[name];
  if (value === undefined) return undefined;
  return typeof value === 'string' ? value : value.join(',');
}

/** The path with dot segments removed and every segment encoded once (non-S3 services normalise). */
function canonicalPath(path: string): string {
  const segments: string[] = [];
  for (const segment of path.split('/').slice(1)) {
    if (segment === '.') continue;
    if (segment === '..') segments.pop();
    else segments.push(uriEncode(safeDecode(segment)));
  }
  return '/' + segments.filter((s, i) => s !== '' || i === segments.length - 1).join('/');
}

function canonicalQuery(pairs: readonly [string, string][]): string {
  return pairs
    .map(([k, v]) => [uriEncode(k), uriEncode(v)] as const)
    .sort(([ak, av], [bk, bv]) => (ak < bk ? -1 : ak > bk ? 1 : av < bv ? -1 : av > bv ? 1 : 0))
    .map(([k, v]) => `${k}=${v}`)
    .join('&');
}

function canonicalHeaderValue(value: string): string {
  return value.trim().replace(/\s+/g, ' ');
}

/** The canonical request string SigV4 hashes (step 1 of the algorithm). */
export function canonicalRequest(
  request: SigV4Request,
  signedHeaders: readonly string[],
  presigned: boolean,
) {
  const { path, query } = splitUrl(request.url);
  const pairs = queryPairs(query).filter(([k]) => !(presigned && k === 'X-Amz-Signature'));
  const headerLines = signedHeaders.map((name) => {
    const raw = request.headers[name];
    const values = raw === undefined ? [] : typeof raw === 'string' ? [raw] : raw;
    return `${name}:${values.map(canonicalHeaderValue).join(',')}\n`;
  });
  const payloadHash = headerValue(request, 'x-amz-content-sha256') ?? sha256Hex(request.body);
  return [
    request.method.toUpperCase(),
    canonicalPath(path === '' ? '/' : path),
    canonicalQuery(pairs),
    headerLines.join(''),
    signedHeaders.join(';'),
    payloadHash,
  ].join('\n');
}

function scopeString(scope: SigV4Scope): string {
  return `${scope.date}/${scope.region}/${scope.service}/aws4_request`;
}

/** The signature of a canonical request under a secret key (steps 2–4 of the algorithm). */
export function computeSignature(
  canonical: string,
  amzDate: string,
  scope: SigV4Scope,
  secretAccessKey: string,
): string {
  const toSign = [sigV4Algorithm, amzDate, scopeString(scope), sha256Hex(canonical)].join('\n');
  const kDate = hmac(`AWS4${secretAccessKey}`, scope.date);
  const kRegion = hmac(kDate, scope.region);
  const kService = hmac(kRegion, scope.service);
  const kSigning = hmac(kService, 'aws4_request');
  return hmac(kSigning, toSign).toString('hex');
}

function parseScope(credential: string): SigV4Scope {
  const parts = credential.split('/');
  if (parts.length !== 5 || parts[4] !== 'aws4_request' || parts.some((p) => p === '')) {
    throw new SigV4Error(
      'IncompleteSignature',
      `the credential ${quoted(credential)} is not of the form <key>/<YYYYMMDD>/<region>/<service>/aws4_request`,
    );
  }
  const [accessKeyId, date, region, service] = parts as [string, string, string, string];
  if (!/^\d{8}$/.test(date))
    throw new SigV4Error('IncompleteSignature', `the credential date ${quoted(date)} is invalid`);
  return { accessKeyId, date, region, service };
}

function parseSignedHeaders(value: string): string[] {
  const names = value.split(';').map((n) => n.trim().toLowerCase());
  if (names.some((n) => n === '')) {
    throw new SigV4Error('IncompleteSignature', `SignedHeaders ${quoted(value)} lists an empty header name`);
  }
  return names;
}

/** Reads what a request claims about its signature; throws a {@link SigV4Error} when none or malformed. */
export function parseSigV4(request: SigV4Request): SigV4Claims {
  const authorization = headerValue(request, 'authorization');
  const query = new Map(queryPairs(splitUrl(request.url).query));
  if (authorization === undefined && !query.has('X-Amz-Signature')) {
    throw new SigV4Error(
      'MissingAuthenticationToken',
      'the request is not signed: it has no Authorization header',
    );
  }
  if (authorization !== undefined) {
    if (!authorization.startsWith(`${sigV4Algorithm} `)) {
      throw new SigV4Error('IncompleteSignature', `the Authorization header does not use ${sigV4Algorithm}`);
    }
    const fields = new Map<string, string>();
    for (const part of authorization.slice(sigV4Algorithm.length + 1).split(',')) {
      const eq = part.indexOf('=');
      if (eq > 0) fields.set(part.slice(0, eq).trim(), part.slice(eq + 1).trim());
    }
    const credential = fields.get('Credential');
    const signedHeaders = fields.get('SignedHeaders');
    const signature = fields.get('Signature');
    if (!credential || !signedHeaders || !signature) {
      throw new SigV4Error(
        'IncompleteSignature',
        'the Authorization header must carry Credential, SignedHeaders and Signature',
      );
    }
    const amzDate = headerValue(request, 'x-amz-date');
    if (amzDate === undefined) {
      throw new SigV4Error('IncompleteSignature', 'the request has no X-Amz-Date header');
    }
    const securityToken = headerValue(request, 'x-amz-security-token');
    return {
      scope: parseScope(credential),
      signedHeaders: parseSignedHeaders(signedHeaders),
      signature: signature.toLowerCase(),
      amzDate,
      presigned: false,
      ...(securityToken === undefined ? {} : { securityToken }),
    };
  }
  const required = ['X-Amz-Algorithm', 'X-Amz-Credential', 'X-Amz-Date', 'X-Amz-SignedHeaders'] as const;
  for (const name of required) {
    if (!query.get(name)) throw new SigV4Error('IncompleteSignature', `the presigned URL has no ${name}`);
  }
  if (query.get('X-Amz-Algorithm') !== sigV4Algorithm) {
    throw new SigV4Error('IncompleteSignature', `the presigned URL does not use ${sigV4Algorithm}`);
  }
  const expires = query.get('X-Amz-Expires');
  const securityToken = query.get('X-Amz-Security-Token');
  return {
    scope: parseScope(query.get('X-Amz-Credential') as string),
    signedHeaders: parseSignedHeaders(query.get('X-Amz-SignedHeaders') as string),
    signature: (query.get('X-Amz-Signature') as string).toLowerCase(),
    amzDate: query.get('X-Amz-Date') as string,
    presigned: true,
    ...(expires === undefined ? {} : { expiresSeconds: Number(expires) }),
    ...(securityToken === undefined ? {} : { securityToken }),
  };
}

/** Parses `YYYYMMDDTHHMMSSZ`; undefined when malformed. */
export function parseAmzDate(amzDate: string): Date | undefined {
  const m = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(amzDate);
  if (!m) return undefined;
  const [, y, mo, d, h, mi, s] = m.map(Number) as [number, number, number, number, number, number, number];
  const date = new Date(Date.UTC(y, mo - 1, d, h, mi, s));
  return Number.isNaN(date.getTime()) ? undefined : date;
}

/** Formats a time as SigV4's `YYYYMMDDTHHMMSSZ`. */
export function formatAmzDate(time: Date): string {
  return time
    .toISOString()
    .replace(/[-:]/g, '')
    .replace(/\.\d{3}/, '');
}

/** Where and when to sign a request. */
export interface SigV4SignOptions {
  region: string;
  service: string;
  now?: Date;
}

/**
 * Signs a request in place of an SDK: returns the headers to send (`x-amz-date`, the session token
 * when there is one, and `authorization`), signing `host` and every header given.
 */
export function signSigV4(
  request: SigV4Request,
  credentials: SigV4Credentials,
  options: SigV4SignOptions,
): Record<string, string> {
  const amzDate = formatAmzDate(options.now ?? new Date());
  const headers: Record<string, string | readonly string[] | undefined> = {
    ...request.headers,
    'x-amz-date': amzDate,
  };
  if (credentials.sessionToken !== undefined) headers['x-amz-security-token'] = credentials.sessionToken;
  const signedHeaders = Object.keys(headers)
    .filter((name) => headers[name] !== undefined && name !== 'authorization')
    .sort();
  const scope: SigV4Scope = {
    accessKeyId: credentials.accessKeyId,
    date: amzDate.slice(0, 8),
    region: options.region,
    service: options.service,
  };
  const canonical = canonicalRequest({ ...request, headers }, signedHeaders, false);
  const signature = computeSignature(canonical, amzDate, scope, credentials.secretAccessKey);
  const added: Record<string, string> = { 'x-amz-date': amzDate };
  if (credentials.sessionToken !== undefined) added['x-amz-security-token'] = credentials.sessionToken;
  added['authorization'] =
    `${sigV4Algorithm} Credential=${credentials.accessKeyId}/${scopeString(scope)}, ` +
    `SignedHeaders=${signedHeaders.join(';')}, Signature=${signature}`;
  return added;
}
