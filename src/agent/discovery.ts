/**
 * Node-side discovery, the kubeadm way: a node that knows only where the bootstrap endpoint is and a
 * `sha256:` pin of the cluster CA (or the CA file itself) learns the API server URL and the CA bundle.
 * With a pin the document is first fetched without TLS verification, then checked — the JWS for the
 * node's token if it has one, the CA against the pin — and fetched again over TLS verified against that
 * CA; both fetches must give byte-identical kubeconfigs, so a man in the middle of the first fetch
 * cannot redirect the node. With a CA file the one fetch is verified from the start.
 */
import { readFile } from 'node:fs/promises';
import { request } from 'node:https';
import {
  clusterInfoPath,
  jwsKeyPrefix,
  kubeconfigKey,
  parseClusterInfoDocument,
  parseClusterInfoKubeconfig,
  verifyDetachedJws,
} from '../bootstrap/discovery.ts';
import { parseToken } from '../bootstrap/tokens.ts';
import {
  ForbiddenError,
  InvalidInputError,
  KopsError,
  NotFoundError,
  TimeoutError,
  TooLargeError,
  UnauthenticatedError,
  UnavailableError,
} from '../errors.ts';
import { type Logger, silentLogger } from '../log.ts';
import { decodePem } from '../pki/pem.ts';
import { parsePin, pinOfSpki, spkiMatchesPins } from '../pki/pin.ts';
import { parseCertificate } from '../pki/x509.ts';

/** What to discover and how to trust it. */
export interface DiscoveryOptions {
  /** The bootstrap endpoint (`https://host:3988`, the path `/cluster-info` is implied) or the document's URL. */
  url: string;
  /** `sha256:` pins of the CA; at least one CA certificate in the bundle must match one. */
  caPins?: readonly string[];
  /** A PEM CA file to trust directly instead of pinning. */
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
  /** The CA bundle the API server certificates chain to. */
  caBundlePem: string;
  /** The token id whose signature was verified, when a token was given. */
  verifiedTokenId?: string;
}

/** cluster-info is a few kilobytes; anything much larger is not one. */
const maxDocumentBytes = 1024 * 1024;

/** TLS verification failures: the server could not prove it holds a certificate from the trusted CA. */
const tlsVerificationCodes = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'CERT_SIGNATURE_FAILURE',
  'ERR_TLS_CERT_ALTNAME_INVALID',
]);

/** The URL of the document: a bare endpoint gets `/cluster-info`. Only https is accepted. */
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
  if (url.pathname === '/' && !url.search) url.pathname = clusterInfoPath;
  return url;
}

/** GETs the document; `ca` undefined means no verification (phase one of pinned discovery). */
function fetchDocument(url: URL, ca: string | undefined, timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        method: 'GET',
        headers: { accept: 'application/json' },
        // A fresh connection each time: the verified fetch must never reuse the unverified one's socket.
        agent: false,
        ...(ca === undefined ? { rejectUnauthorized: false } : { ca, rejectUnauthorized: true }),
        timeout: timeoutMs,
      },
      (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (chunk: Buffer) => {
          size += chunk.length;
          if (size > maxDocumentBytes) {
            req.destroy(
              new TooLargeError(`${url} sent more than ${maxDocumentBytes} bytes; it is not cluster-info`),
            );
          } else chunks.push(chunk);
        });
        res.on('end', () => {
          const body = Buffer.concat(chunks).toString('utf8');
          const status = res.statusCode ?? 0;
          if (status === 200) resolve(body);
          else if (status === 404)
            reject(new NotFoundError(`${url} has no cluster-info (HTTP 404); check the URL`));
          else
            reject(
              new UnavailableError(`${url} answered HTTP ${status}; retry later`, {
                details: { httpStatus: status },
              }),
            );
        });
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new TimeoutError(`${url} did not answer within ${timeoutMs} ms`)));
    req.on('error', (err: NodeJS.ErrnoException) => {
      if (err instanceof KopsError) reject(err);
      else if (err.code && tlsVerificationCodes.has(err.code)) {
        reject(
          new ForbiddenError(
            `${url} did not present a certificate from the cluster CA (${err.code}): ` +
              'someone else may be answering for the bootstrap endpoint',
            { cause: err, details: { reason: 'tls-verification' } },
          ),
        );
      } else reject(new UnavailableError(`cannot fetch ${url}: ${err.message}`, { cause: err }));
    });
    req.end();
  });
}

async function readCaFile(path: string): Promise<string> {
  let pem: string;
  try {
    pem = await readFile(path, 'utf8');
  } catch (err) {
    throw new NotFoundError(`cannot read --ca-file ${path}: ${(err as Error).message}`, { cause: err });
  }
  decodePem(pem, 'CERTIFICATE', path);
  return pem;
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
 * Discovers the cluster: returns the API server URL(s) and CA bundle once every check passed.
 * Throws ForbiddenError for a wrong pin, a server without a certificate from the CA, or a document
 * that changed between the two fetches; UnauthenticatedError for a forged signature; UnavailableError
 * (retryable) when the token's signature is missing or the endpoint is down.
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
  const trustedCa = options.caFile ? await readCaFile(options.caFile) : undefined;

  const first = parseClusterInfoDocument(await fetchDocument(url, trustedCa, timeoutMs), String(url));
  const kubeconfig = first.data[kubeconfigKey] as string;
  const verifiedTokenId = token ? checkSignature(first.data, kubeconfig, token) : undefined;
  const info = parseClusterInfoKubeconfig(kubeconfig);
  if (pins.length > 0) {
    const spkis = decodePem(info.caBundlePem, 'CERTIFICATE', 'the cluster-info CA bundle').map(
      (der) => parseCertificate(der).spki,
    );
    if (!spkis.some((spki) => spkiMatchesPins(spki, pins))) {
      throw new ForbiddenError(
        `none of the CA certificates from ${url} matches --ca-pin (they are ${spkis.map(pinOfSpki).join(', ')}): ` +
          'check the pin, or someone else is answering for the bootstrap endpoint',
        { details: { reason: 'ca-pin-mismatch' } },
      );
    }
  }
  if (!trustedCa) {
    // Phase two: only now is the CA trusted; the same document must come back over verified TLS.
    const second = parseClusterInfoDocument(
      await fetchDocument(url, info.caBundlePem, timeoutMs),
      String(url),
    );
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
    caBundlePem: info.caBundlePem,
    verifiedTokenId,
  };
}
