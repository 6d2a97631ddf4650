/**
 * Reading a kops AWS identity proof (`x-aws-sts` v1 signed headers, `x-aws-sts-v2` presigned URL)
 * into the exact request to replay to STS, and checking — before anything goes over the network —
 * that it can only be a regional GetCallerIdentity whose signature covers `X-Kops-Request-Sha`, and
 * that this header is the hash of the body the node sent us. Pure: no clock, no I/O.
 */
import { timingSafeEqual } from 'node:crypto';
import { parseSigV4, type SigV4Claims, type SigV4Request } from '../../cloud/aws/sigv4.ts';
import { UnauthenticatedError } from '../../errors.ts';
import { isJsonObject } from '../../json-object.ts';
import { getCallerIdentityBody, kopsRequestSha } from '../../protocol/aws-sts-proof.ts';
import { quoted } from '../../quote.ts';

/** A proof turned into the request to send to STS, with what its signature claims. */
export interface StsReplayRequest {
  version: 1 | 2;
  /** Method, path+query, headers (lower case, `host` = the regional STS host) and body to send. */
  request: SigV4Request & { body: string; headers: Record<string, string[]> };
  claims: SigV4Claims;
}

/** The largest proof accepted; real ones are about 2 KB. */
const maxProofBytes = 16 * 1024;
/**
 * Headers that must not be forwarded: they belong to the connection, not to the signed request, and
 * replays share pooled connections (sts-client.ts), so they could frame another node's request.
 */
export const connectionHeaders = new Set([
  'connection',
  'keep-alive',
  'transfer-encoding',
  'te',
  'trailer',
  'upgrade',
  'expect',
  'proxy-authorization',
  'proxy-connection',
]);

/**
 * Headers that would change the bytes of STS's answer past what the controller reads: a compressed
 * answer could not be read, and a 200 no one can read is a fault (503), so a node could turn its own
 * denial into an STS fault at will. Refused even when signed (an unsigned one is dropped anyway, see
 * keepSignedHeaders); no SDK signs them (Go's transport adds Accept-Encoding after signing, outside
 * the proof). A signed `Accept` is kept: STS's JSON answer is read as its XML one.
 */
const answerEncodingHeaders = new Set(['accept-encoding']);

/**
 * Only what the node signed (and its signature) is sent to STS: a header it did not sign cannot
 * change STS's verdict, but could change the form of STS's answer (`Accept`) past what the
 * controller reads, and a 200 no one can read is a fault: the node would turn its own denial into one.
 */
function keepSignedHeaders(
  headers: Record<string, string[]>,
  claims: { signedHeaders: readonly string[] },
): void {
  for (const name of Object.keys(headers)) {
    if (name !== 'authorization' && !claims.signedHeaders.includes(name)) delete headers[name];
  }
}

/**
 * Nothing in a proof is verified until STS answers, so a refusal shows its fields through `quoted`:
 * they reach the audit trail, and a 12 KB Host repeated in full made each denial cost the log 24 KB.
 */
function reject(message: string): never {
  throw new UnauthenticatedError(`AWS identity proof rejected: ${message}`);
}

function decodeJson(token: string): unknown {
  if (token.length > maxProofBytes) reject(`it is larger than ${maxProofBytes} bytes`);
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(token)) reject('it is not base64');
  try {
    return JSON.parse(Buffer.from(token, 'base64').toString('utf8'));
  } catch {
    return reject('it is not base64 of JSON');
  }
}

/** Lower-cases header names and checks the shape Go's http.Header marshals to. */
function readHeaders(raw: unknown): Record<string, string[]> {
  if (!isJsonObject(raw)) reject('its headers are not an object');
  const headers: Record<string, string[]> = Object.create(null);
  for (const [name, value] of Object.entries(raw as Record<string, unknown>)) {
    const lower = name.toLowerCase();
    if (!/^[a-z0-9-]{1,64}$/.test(lower)) reject(`header name ${quoted(name)} is invalid`);
    const values = typeof value === 'string' ? [value] : value;
    if (!Array.isArray(values) || values.length === 0 || values.some((v) => typeof v !== 'string')) {
      reject(`header ${name} must be a string or a list of strings`);
    }
    // What Node's http client refuses in a header value (line breaks, other controls, beyond Latin-1).
    if ((values as string[]).some((v) => /[^\t\x20-\x7e\x80-\xff]/.test(v))) {
      reject(`header ${name} has a line break or another character HTTP does not allow`);
    }
    if (connectionHeaders.has(lower) || answerEncodingHeaders.has(lower))
      reject(`header ${name} may not be part of the proof`);
    headers[lower] = [...(headers[lower] ?? []), ...(values as string[])];
  }
  return headers;
}

function sameText(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/** Checks `x-kops-request-sha` against the body and that the signature covers it and `host`. */
function checkBinding(headers: Record<string, string[]>, claims: SigV4Claims, body: Uint8Array): void {
  const sha = headers['x-kops-request-sha'];
  if (sha?.length !== 1) reject('it carries no single X-Kops-Request-Sha header');
  if (!claims.signedHeaders.includes('x-kops-request-sha')) {
    reject('X-Kops-Request-Sha is not among the signed headers, so the proof is not bound to this request');
  }
  if (!claims.signedHeaders.includes('host')) reject('the Host header is not signed');
  // Accept the padded form too: the binding is to the hash, not to one base64 spelling.
  if (!sameText((sha[0] as string).replace(/=+$/, ''), kopsRequestSha(body))) {
    reject(
      'X-Kops-Request-Sha is not the SHA-256 of this request body (the proof was signed for another request)',
    );
  }
  if (claims.scope.service !== 'sts')
    reject(`it is signed for service ${quoted(claims.scope.service)}, not sts`);
}

function parseSignature(request: SigV4Request): SigV4Claims {
  try {
    return parseSigV4(request);
  } catch (err) {
    return reject((err as Error).message);
  }
}

/**
 * Parses a proof of `version` for a request whose body is `body`, for the STS host `host`; throws
 * UnauthenticatedError saying what is wrong.
 */
export function parseStsProof(
  version: 1 | 2,
  token: string,
  body: Uint8Array,
  host: string,
): StsReplayRequest {
  const decoded = decodeJson(token);
  if (version === 1) {
    const headers = readHeaders(decoded);
    const given = headers['host'];
    if (given && (given.length !== 1 || given[0] !== host))
      reject(`it names host ${quoted(String(given[0]))}, not ${host}`);
    headers['host'] = [host];
    const authorization = headers['authorization'];
    if (authorization?.length !== 1 || !authorization[0]?.startsWith('AWS4-HMAC-SHA256 ')) {
      reject('its Authorization header is not one AWS4-HMAC-SHA256 signature');
    }
    const length = headers['content-length'];
    if (length && (length.length !== 1 || length[0] !== String(getCallerIdentityBody.length))) {
      reject('its Content-Length does not fit the GetCallerIdentity body');
    }
    delete headers['content-length'];
    const request = { method: 'POST', url: '/', headers, body: getCallerIdentityBody };
    const claims = parseSignature(request);
    checkBinding(headers, claims, body);
    keepSignedHeaders(headers, claims);
    return { version, request, claims };
  }
  if (!isJsonObject(decoded)) reject('it is not an object');
  const { url, method, headers: rawHeaders } = decoded as Record<string, unknown>;
  if (typeof url !== 'string' || url.length > 8192) reject('it has no url');
  if (method !== 'GET') reject('its method is not GET');
  let parsed: URL;
  try {
    parsed = new URL(url as string);
  } catch {
    return reject('its url is not a URL');
  }
  if (parsed.protocol !== 'https:') reject('its url is not https');
  if (parsed.host !== host) reject(`its url names host ${quoted(parsed.host)}, not ${host}`);
  if (parsed.pathname !== '/' || parsed.username || parsed.password || parsed.hash) {
    reject('its url is not the STS root path');
  }
  const actions = parsed.searchParams.getAll('Action');
  if (actions.length !== 1 || actions[0] !== 'GetCallerIdentity') {
    reject('its url is not exactly one Action=GetCallerIdentity');
  }
  const headers = readHeaders(rawHeaders ?? {});
  headers['host'] = [host];
  // A GET has no body: a length here would make STS read the next request on the connection as one.
  const length = headers['content-length'];
  if (length && (length.length !== 1 || length[0] !== '0')) reject('its Content-Length does not fit a GET');
  delete headers['content-length'];
  // The signature covers the query exactly as written, so it is taken from the raw URL, not re-encoded.
  const prefix = `https://${host}/`;
  if (!(url as string).startsWith(prefix)) reject(`its url does not start with ${prefix}`);
  const pathAndQuery = (url as string).slice(prefix.length - 1);
  // Spaces and controls are sent by nobody's SDK, and Node's http client refuses them in a path.
  if (/[^\u0021-\u00ff]/.test(pathAndQuery)) reject('its url has spaces or control characters');
  const request = { method: 'GET', url: pathAndQuery, headers, body: '' };
  const claims = parseSignature(request);
  if (!claims.presigned) reject('its url is not presigned');
  checkBinding(headers, claims, body);
  keepSignedHeaders(headers, claims);
  return { version, request, claims };
}
