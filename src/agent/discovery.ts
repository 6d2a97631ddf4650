/**
 * Node-side discovery, the kubeadm way: a node that knows only where the bootstrap endpoint is and a
 * `sha256:` pin of the cluster CA (or the CA file itself) learns the API server URL and the CA bundle.
 * With a pin the document is first fetched without TLS verification, then checked — the JWS for the
 * node's token if it has one, then every CA in its bundle against the pins — and fetched again over
 * TLS verified against the pinned CAs only; both fetches must give byte-identical kubeconfigs, so a
 * man in the middle of the first fetch cannot redirect the node. With a CA file the one fetch is
 * verified from the start, and the bundle must hold only the file's CAs. What discovery returns is
 * what the node trusts from then on: the pinned CAs, nothing the document added.
 */
import { readFile } from 'node:fs/promises';
import {
  ForbiddenError,
  InvalidInputError,
  type KopsError,
  NotFoundError,
  TimeoutError,
  TooLargeError,
  UnauthenticatedError,
  UnavailableError,
} from '../errors.ts';
import { type Logger, silentLogger } from '../log.ts';
import { type HttpsAnswer, httpsRequest, TlsVerificationError } from '../net/https-client.ts';
import { parsePin } from '../pki/pin.ts';
import { parseToken } from '../protocol/bootstrap-token.ts';
import {
  jwsKeyPrefix,
  kubeconfigKey,
  parseClusterInfoDocument,
  parseClusterInfoKubeconfig,
  verifyDetachedJws,
} from '../protocol/cluster-info.ts';
import { endpointUrl } from './endpoint-url.ts';
import { answerError } from './http-answer.ts';
import { clockValidityFault } from './node-clock.ts';
import { fileAnchor, pinnedBundle, type TrustAnchor } from './pinned-trust.ts';

/** What to discover and how to trust it. */
export interface DiscoveryOptions {
  /**
   * The bootstrap endpoint (`https://host:3988`, or with a path prefix `https://lb/kops`: the document
   * is `cluster-info` under it) or the document's URL (`…/cluster-info`).
   */
  url: string;
  /** `sha256:` pins of the CAs; every CA certificate in the bundle must match one. */
  caPins?: readonly string[];
  /** A PEM CA file to trust directly; every CA certificate in the bundle must be one of its own. */
  caFile?: string;
  /** `<id>.<secret>`: require the document to carry this token's signature. */
  token?: string;
  /** Per fetch; default 10 s. */
  timeoutMs?: number;
  logger?: Logger;
}

/** What discovery learned, all of it verified. */
export interface DiscoveredCluster {
  /** The first API server URL. */
  server: string;
  servers: string[];
  /** The pinned CAs of the bundle, as canonical PEM: all the node trusts from now on. */
  caBundlePem: string;
  /** The token id whose signature was verified, when a token was given. */
  verifiedTokenId?: string;
}

/** cluster-info is a few kilobytes; anything much larger is not one. */
const maxDocumentBytes = 1024 * 1024;

/**
 * The URL of the document: `cluster-info` under the endpoint's path (src/agent/endpoint-url.ts), or
 * the URL itself when it names the document. Only https is accepted.
 */
export function clusterInfoUrl(endpoint: string): URL {
  let url: URL;
  try {
    url = new URL(endpoint);
  } catch {
    throw new InvalidInputError(`"${endpoint}" is not a URL; use e.g. https://203.0.113.10:3988`);
  }
  if (url.protocol !== 'https:' || url.username || url.password) {
    throw new InvalidInputError(`the discovery URL "${endpoint}" must be https:// without credentials`);
  }
  return endpointUrl(url, 'cluster-info');
}

/** GETs the document; `ca` undefined means no verification (phase one of pinned discovery). */
async function fetchDocument(url: URL, ca: string | undefined, timeoutMs: number): Promise<string> {
  let answer: HttpsAnswer;
  try {
    answer = await httpsRequest({
      url,
      headers: { accept: 'application/json' },
      // A fresh connection each time: the verified fetch must never reuse the unverified one's socket.
      agent: false,
      ca,
      rejectUnauthorized: ca !== undefined,
      timeoutMs,
      maxBodyBytes: maxDocumentBytes,
    });
  } catch (err) {
    throw await fetchError(url, err as Error, timeoutMs, ca);
  }
  if (answer.status !== 200) {
    throw answerError(
      `GET ${url}`,
      answer.status,
      answer.body,
      answer.headers['retry-after'],
      undefined,
      answer.headers['date'],
    );
  }
  return answer.body.toString('utf8');
}

async function fetchError(
  url: URL,
  err: Error,
  timeoutMs: number,
  ca: string | undefined,
): Promise<KopsError> {
  if (err instanceof TlsVerificationError) {
    // Out of its dates by this machine's clock, which chrony may step a moment later: a fault.
    const dated =
      ca === undefined
        ? undefined
        : await clockValidityFault(err.code, {
            url,
            caBundlePem: ca,
            peer: String(url),
            viaProxy: true,
            timeoutMs,
          });
    if (dated) return dated;
    return new ForbiddenError(
      `${url} did not present a certificate from the cluster CA (${err.code}): ` +
        'someone else may be answering for the bootstrap endpoint',
      { details: { reason: 'tls-verification' } },
    );
  }
  if (err instanceof TimeoutError) return new TimeoutError(`${url} did not answer within ${timeoutMs} ms`);
  if (err instanceof TooLargeError) {
    return new TooLargeError(`${url} sent more than ${maxDocumentBytes} bytes; it is not cluster-info`);
  }
  return new UnavailableError(`cannot fetch ${url}: ${err.message}`, { cause: err });
}

async function readCaFile(path: string): Promise<TrustAnchor & { pem: string }> {
  let pem: string;
  try {
    pem = await readFile(path, 'utf8');
  } catch (err) {
    throw new NotFoundError(`cannot read --ca-file ${path}: ${(err as Error).message}`, { cause: err });
  }
  return fileAnchor(path, pem);
}

/** Verifies the document's signature for the token; throws the typed error a join client can act on. */
function checkSignature(
  data: Record<string, string>,
  kubeconfig: string,
  parsed: { id: string; secret: string },
): string {
  const jws = data[jwsKeyPrefix + parsed.id];
  if (jws === undefined) {
    // The signer adds signatures shortly after a token is created, so this may be worth a retry.
    throw new UnavailableError(
      `cluster-info has no signature for token id ${parsed.id}: the token is unknown, expired, not allowed ` +
        'to sign, or not published yet',
      { details: { reason: 'jws-missing', tokenId: parsed.id } },
    );
  }
  if (!verifyDetachedJws(jws, kubeconfig, parsed.id, parsed.secret)) {
    throw new UnauthenticatedError(
      `the cluster-info signature for token id ${parsed.id} does not verify: the document was forged or ` +
        'altered, or the token secret is wrong',
      { details: { reason: 'jws-invalid', tokenId: parsed.id } },
    );
  }
  return parsed.id;
}

/**
 * Discovers the cluster: returns the API server URL(s) and the pinned CA bundle once every check
 * passed. Throws ForbiddenError for a wrong pin, a CA in the bundle that is not pinned, a server
 * without a certificate from a pinned CA, or a document that changed between the two fetches;
 * UnauthenticatedError for a forged signature; the typed error of a permanent HTTP answer (final);
 * UnavailableError or RateLimitedError (retryable) when the token's signature is missing or the
 * endpoint is down.
 */
export async function discoverCluster(options: DiscoveryOptions): Promise<DiscoveredCluster> {
  const logger = options.logger ?? silentLogger;
  const timeoutMs = options.timeoutMs ?? 10_000;
  const url = clusterInfoUrl(options.url);
  const pins = options.caPins ?? [];
  for (const pin of pins) parsePin(pin);
  const token = options.token === undefined ? undefined : parseToken(options.token);
  if (options.token !== undefined && !token) {
    throw new InvalidInputError('the token must have the form ID.SECRET ([a-z0-9]{6}.[a-z0-9]{16})');
  }
  if (pins.length === 0 && !options.caFile) {
    throw new InvalidInputError(
      'discovery needs a way to trust the cluster CA: pass --ca-pin sha256:... (from `kops-controller pki pin`) ' +
        'or --ca-file FILE',
    );
  }
  const caFile = options.caFile ? await readCaFile(options.caFile) : undefined;
  const anchors: TrustAnchor[] = [
    ...(pins.length > 0 ? [{ flag: '--ca-pin', pins }] : []),
    ...(caFile ? [caFile] : []),
  ];

  const first = parseClusterInfoDocument(await fetchDocument(url, caFile?.pem, timeoutMs), String(url));
  const kubeconfig = first.data[kubeconfigKey] as string;
  const verifiedTokenId = token ? checkSignature(first.data, kubeconfig, token) : undefined;
  const info = parseClusterInfoKubeconfig(kubeconfig);
  const caBundlePem = pinnedBundle(info.caBundlePem, anchors, String(url));
  if (!caFile) {
    // Phase two: only now are the pinned CAs trusted, and only they; the same document must come back.
    const second = parseClusterInfoDocument(await fetchDocument(url, caBundlePem, timeoutMs), String(url));
    if (!Buffer.from(second.data[kubeconfigKey] as string).equals(Buffer.from(kubeconfig))) {
      throw new ForbiddenError(
        `the cluster-info from ${url} changed between the unverified and the verified fetch: ` +
          'someone may be tampering with the connection; retry, and investigate if it persists',
        { details: { reason: 'kubeconfig-mismatch' } },
      );
    }
  }
  logger.info(
    { url: String(url), servers: info.servers, tokenId: verifiedTokenId },
    'discovered the cluster',
  );
  return {
    server: info.servers[0] as string,
    servers: info.servers,
    caBundlePem,
    verifiedTokenId,
  };
}
