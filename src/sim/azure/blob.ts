/**
 * A simulated Azure Blob Storage on loopback HTTPS, speaking the Blob REST protocol the SDK
 * (`@azure/storage-blob`) uses for the state store, path-style as Azurite serves it
 * (`https://127.0.0.1:PORT/<account>/<container>/<blob>`):
 * - Get Blob (`GET`, with `x-ms-range`/`Range`), Get Blob Properties (`HEAD`), Put Blob (`PUT`,
 *   `x-ms-blob-type: BlockBlob`, checking `Content-MD5` when sent), Delete Blob (`DELETE`, 202);
 * - List Blobs (`GET ?restype=container&comp=list`) in its XML, with `prefix`, `marker` and
 *   `maxresults` (at most 5,000), paged by an opaque `NextMarker`;
 * - every request needs `x-ms-version` (400 `MissingRequiredHeader`) and a bearer token the Azure
 *   simulator's managed-identity endpoint issued (401 `NoAuthenticationInformation` /
 *   `InvalidAuthenticationInfo`, with the `WWW-Authenticate` challenge Azure sends);
 * - errors in Azure Storage's shape: `x-ms-error-code` and an XML `<Error>` body (none for HEAD);
 *   `ContainerNotFound`, `BlobNotFound`; ETags `"0x8D…"` that change on every write.
 * Faults: the next N requests (of one operation, or any) answer a status (503 `ServerBusy`, …), are
 * delayed or dropped.
 */
import { createHash, randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { listenOnLoopback } from '../../net/loopback.ts';
import { readBody } from '../../net/read-body.ts';
import { applyTransportFault, CallLog, FaultQueue, type FaultVerbs, faultVerbs } from '../cloud-sim.ts';
import { createCertificateAuthority, issueServingCertificate, type SimCertificateAuthority } from '../tls.ts';

/** One request the blob service served (`blob.get`, `blob.properties`, `blob.put`, `blob.delete`, `blob.list`). */
export interface BlobCall {
  operation: string;
  path: string;
}

/** The simulated blob service's controls. */
export interface BlobStorageSimulator extends FaultVerbs {
  /** Path-style base URL (`https://127.0.0.1:PORT`): the value of `KOPS_AZURE_BLOB_ENDPOINT`. */
  endpoint: string;
  /** PEM of the CA that signed the serving certificate (the client's `caPem`, or `NODE_EXTRA_CA_CERTS`). */
  caPem: string;
  createContainer(account: string, container: string): void;
  putBlob(account: string, container: string, name: string, data: Buffer | string): void;
  getBlob(account: string, container: string, name: string): Buffer | undefined;
  /**
   * Answers every authorised request of `operation` (`blob.list`, `blob.get`, `blob.properties`, …)
   * with `answer` instead, until cleared with undefined: a broken store or proxy, for the tests of
   * what the controller believes. An answer that returns false lets the simulator answer as usual.
   */
  answerWith(operation: string, answer: BlobSimAnswer | undefined): void;
  readonly calls: readonly BlobCall[];
  count(operation: string): number;
  clearCalls(): void;
  close(): Promise<void>;
}

/** A test's own answer to one request (see {@link BlobStorageSimulator.answerWith}); false: as usual. */
export type BlobSimAnswer = (req: IncomingMessage, res: ServerResponse, url: URL) => unknown;

interface Blob {
  data: Buffer;
  etag: string;
  created: Date;
  lastModified: Date;
}

interface BlobState {
  base: string;
  /** `<account>/<container>` → blob name → blob. */
  containers: Map<string, Map<string, Blob>>;
  validToken: (token: string) => boolean;
  log: CallLog<BlobCall>;
  faults: FaultQueue;
  etags: number;
  /** Answers a test put in place (answerWith), by operation. */
  answers: Map<string, BlobSimAnswer>;
}

const apiVersionFallback = '2025-11-05';
const maxResultsLimit = 5_000;

const faultCodes: Record<number, string> = {
  500: 'InternalError',
  503: 'ServerBusy',
  429: 'ServerBusy',
  403: 'AuthorizationPermissionMismatch',
};

const xmlEscape = (s: string) =>
  s.replace(
    /[<>&'"]/g,
    (c) => ({ '<': '&lt;', '>': '&gt;', '&': '&amp;', "'": '&apos;', '"': '&quot;' })[c] as string,
  );

/** Headers every answer carries. */
function commonHeaders(req: IncomingMessage): Record<string, string> {
  const version = req.headers['x-ms-version'];
  return {
    'x-ms-request-id': randomUUID(),
    'x-ms-version': typeof version === 'string' ? version : apiVersionFallback,
    server: 'Windows-Azure-Blob/1.0 Microsoft-HTTPAPI/2.0',
    date: new Date().toUTCString(),
  };
}

/** Azure Storage's error: `x-ms-error-code` and, except for HEAD, an XML body. */
function storageError(
  req: IncomingMessage,
  res: ServerResponse,
  status: number,
  code: string,
  message: string,
  headers: Record<string, string> = {},
): void {
  const requestId = randomUUID();
  const body =
    req.method === 'HEAD'
      ? ''
      : `\uFEFF<?xml version="1.0" encoding="utf-8"?><Error><Code>${code}</Code><Message>${xmlEscape(
          message,
        )}\nRequestId:${requestId}\nTime:${new Date().toISOString()}</Message></Error>`;
  res.writeHead(status, {
    ...commonHeaders(req),
    'x-ms-request-id': requestId,
    'x-ms-error-code': code,
    'content-type': 'application/xml',
    'content-length': Buffer.byteLength(body),
    ...headers,
  });
  res.end(req.method === 'HEAD' ? undefined : body);
}

/** The operation a request is. */
function operationOf(method: string | undefined, url: URL): string {
  const segments = url.pathname.split('/').filter((s) => s !== '');
  const comp = url.searchParams.get('comp');
  if (segments.length === 2) {
    return method === 'GET' && url.searchParams.get('restype') === 'container' && comp === 'list'
      ? 'blob.list'
      : 'blob.unsupported';
  }
  if (segments.length < 3 || comp !== null) return 'blob.unsupported';
  const verbs: Record<string, string> = {
    GET: 'blob.get',
    HEAD: 'blob.properties',
    PUT: 'blob.put',
    DELETE: 'blob.delete',
  };
  return verbs[method ?? ''] ?? 'blob.unsupported';
}

/** The blob's headers, as Get Blob and Get Blob Properties answer them. */
function blobHeaders(blob: Blob): Record<string, string | number> {
  return {
    etag: blob.etag,
    'last-modified': blob.lastModified.toUTCString(),
    'x-ms-creation-time': blob.created.toUTCString(),
    'content-type': 'application/octet-stream',
    'content-md5': createHash('md5').update(blob.data).digest('base64'),
    'x-ms-blob-type': 'BlockBlob',
    'x-ms-lease-status': 'unlocked',
    'x-ms-lease-state': 'available',
    'x-ms-server-encrypted': 'true',
    'accept-ranges': 'bytes',
  };
}

/** The List Blobs answer. */
function listBlobs(
  state: BlobState,
  account: string,
  containerName: string,
  blobs: Map<string, Blob>,
  url: URL,
) {
  const prefix = url.searchParams.get('prefix') ?? '';
  const marker = url.searchParams.get('marker') ?? '';
  const requested = Number(url.searchParams.get('maxresults') ?? maxResultsLimit);
  const max = Math.min(
    Number.isInteger(requested) && requested > 0 ? requested : maxResultsLimit,
    maxResultsLimit,
  );
  const after = marker ? Buffer.from(marker, 'base64url').toString('utf8') : '';
  const names = [...blobs.keys()].filter((n) => n.startsWith(prefix) && (!after || n >= after)).sort();
  const page = names.slice(0, max);
  const next = names[max];
  const items = page
    .map((name) => {
      const blob = blobs.get(name) as Blob;
      return (
        `<Blob><Name>${xmlEscape(name)}</Name><Properties>` +
        `<Creation-Time>${blob.created.toUTCString()}</Creation-Time>` +
        `<Last-Modified>${blob.lastModified.toUTCString()}</Last-Modified>` +
        `<Etag>${blob.etag}</Etag><Content-Length>${blob.data.length}</Content-Length>` +
        '<Content-Type>application/octet-stream</Content-Type>' +
        `<Content-MD5>${createHash('md5').update(blob.data).digest('base64')}</Content-MD5>` +
        '<BlobType>BlockBlob</BlobType><AccessTier>Hot</AccessTier><AccessTierInferred>true</AccessTierInferred>' +
        '<LeaseStatus>unlocked</LeaseStatus><LeaseState>available</LeaseState>' +
        '<ServerEncrypted>true</ServerEncrypted></Properties></Blob>'
      );
    })
    .join('');
  return (
    `\uFEFF<?xml version="1.0" encoding="utf-8"?><EnumerationResults ServiceEndpoint="${xmlEscape(
      `${state.base}/${account}/`,
    )}" ContainerName="${xmlEscape(containerName)}">` +
    (prefix ? `<Prefix>${xmlEscape(prefix)}</Prefix>` : '') +
    (marker ? `<Marker>${xmlEscape(marker)}</Marker>` : '') +
    `<MaxResults>${max}</MaxResults><Blobs>${items}</Blobs>` +
    (next
      ? `<NextMarker>${Buffer.from(next, 'utf8').toString('base64url')}</NextMarker>`
      : '<NextMarker />') +
    '</EnumerationResults>'
  );
}

/** The byte range a Get Blob asks for (`x-ms-range` wins over `Range`), or undefined for all of it. */
function rangeOf(req: IncomingMessage, size: number): { start: number; end: number } | 'invalid' | undefined {
  const header = req.headers['x-ms-range'] ?? req.headers.range;
  if (typeof header !== 'string') return undefined;
  const match = /^bytes=(\d+)-(\d*)$/.exec(header.trim());
  if (!match) return undefined;
  const start = Number(match[1]);
  const end = match[2] ? Math.min(Number(match[2]), size - 1) : size - 1;
  if (start >= size || end < start) return 'invalid';
  return { start, end };
}

async function serveBlob(state: BlobState, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? '/', state.base);
  const operation = operationOf(req.method, url);
  state.log.add({ operation, path: `${url.pathname}${url.search}` });
  const fault = state.faults.take(operation);
  if (await applyTransportFault(fault, req)) return;
  if (fault?.status) {
    const code = faultCodes[fault.status] ?? 'InjectedFault';
    const retry: Record<string, string> = fault.retryAfterSeconds
      ? { 'retry-after': String(fault.retryAfterSeconds) }
      : {};
    return storageError(req, res, fault.status, code, `injected fault: ${code}`, retry);
  }
  if (typeof req.headers['x-ms-version'] !== 'string') {
    return storageError(
      req,
      res,
      400,
      'MissingRequiredHeader',
      "An HTTP header that's mandatory for this request is not specified.",
    );
  }
  const challenge = {
    'www-authenticate':
      'Bearer authorization_uri=https://login.microsoftonline.com/00000000-0000-0000-0000-000000000000/oauth2/authorize resource_id=https://storage.azure.com',
  };
  const authorization = req.headers.authorization;
  if (typeof authorization !== 'string' || !authorization.startsWith('Bearer ')) {
    return storageError(
      req,
      res,
      401,
      'NoAuthenticationInformation',
      'Server failed to authenticate the request. Please refer to the information in the www-authenticate header.',
      challenge,
    );
  }
  if (!state.validToken(authorization.slice('Bearer '.length).trim())) {
    return storageError(
      req,
      res,
      401,
      'InvalidAuthenticationInfo',
      'Server failed to authenticate the request. Please refer to the information in the www-authenticate header.',
      challenge,
    );
  }
  const answer = state.answers.get(operation);
  if (answer && (await answer(req, res, url)) !== false) return;
  if (operation === 'blob.unsupported') {
    return storageError(
      req,
      res,
      400,
      'UnsupportedHttpVerb',
      "The resource doesn't support the specified HTTP verb.",
    );
  }
  const [account, containerName, ...rest] = url.pathname
    .split('/')
    .filter((s) => s !== '')
    .map(decodeURIComponent) as [string, string, ...string[]];
  const blobs = state.containers.get(`${account}/${containerName}`);
  // Put Blob's body is read whatever the answer, so that the connection stays usable.
  const body = operation === 'blob.put' ? await readBody(req, 64 * 1024 * 1024) : undefined;
  if (!blobs)
    return storageError(req, res, 404, 'ContainerNotFound', 'The specified container does not exist.');
  const headers = commonHeaders(req);
  if (operation === 'blob.list') {
    const xml = listBlobs(state, account, containerName, blobs, url);
    res.writeHead(200, {
      ...headers,
      'content-type': 'application/xml',
      'content-length': Buffer.byteLength(xml),
    });
    res.end(xml);
    return;
  }
  const name = rest.join('/');
  if (operation === 'blob.put') {
    if (req.headers['x-ms-blob-type'] !== 'BlockBlob') {
      return storageError(req, res, 400, 'MissingRequiredHeader', 'x-ms-blob-type must be BlockBlob.');
    }
    const data = body as Buffer;
    const md5 = createHash('md5').update(data).digest('base64');
    const sent = req.headers['content-md5'];
    if (typeof sent === 'string' && sent !== md5) {
      return storageError(
        req,
        res,
        400,
        'Md5Mismatch',
        'The MD5 value specified in the request did not match.',
      );
    }
    const now = new Date();
    const blob = { data, etag: etagOf(state), created: blobs.get(name)?.created ?? now, lastModified: now };
    blobs.set(name, blob);
    res.writeHead(201, {
      ...headers,
      etag: blob.etag,
      'last-modified': now.toUTCString(),
      'content-md5': md5,
      'x-ms-request-server-encrypted': 'true',
      'content-length': 0,
    });
    res.end();
    return;
  }
  const blob = blobs.get(name);
  if (!blob) return storageError(req, res, 404, 'BlobNotFound', 'The specified blob does not exist.');
  if (operation === 'blob.delete') {
    blobs.delete(name);
    res.writeHead(202, { ...headers, 'x-ms-delete-type-permanent': 'true', 'content-length': 0 });
    res.end();
    return;
  }
  if (operation === 'blob.properties') {
    res.writeHead(200, { ...headers, ...blobHeaders(blob), 'content-length': blob.data.length });
    res.end();
    return;
  }
  const range = rangeOf(req, blob.data.length);
  if (range === 'invalid') {
    return storageError(
      req,
      res,
      416,
      'InvalidRange',
      'The range specified is invalid for the current size of the resource.',
    );
  }
  const data = range ? blob.data.subarray(range.start, range.end + 1) : blob.data;
  res.writeHead(range ? 206 : 200, {
    ...headers,
    ...blobHeaders(blob),
    'content-length': data.length,
    ...(range ? { 'content-range': `bytes ${range.start}-${range.end}/${blob.data.length}` } : {}),
  });
  res.end(data);
}

/** A new ETag, as Azure writes them (`"0x8D…"`), different on every write. */
function etagOf(state: BlobState): string {
  state.etags++;
  return `"0x8D${(Date.now() * 1000 + state.etags).toString(16).toUpperCase().padStart(13, '0')}"`;
}

/** Options of {@link startBlobStorageSimulator}. */
export interface BlobStorageSimulatorOptions {
  /**
   * Which bearer tokens are valid: the Azure simulator's (`AzureSimulator.validToken`), so that the
   * SDK's credential gets them from its managed-identity endpoint.
   */
  validToken: (token: string) => boolean;
  /** The CA that signs the serving certificate (default a fresh one). */
  ca?: SimCertificateAuthority;
}

/** Starts the blob service on 127.0.0.1 over TLS, accepting the bearer tokens `validToken` approves. */
export async function startBlobStorageSimulator(
  options: BlobStorageSimulatorOptions,
): Promise<BlobStorageSimulator> {
  const state: BlobState = {
    base: '',
    containers: new Map(),
    validToken: options.validToken,
    log: new CallLog(),
    faults: new FaultQueue(),
    etags: 0,
    answers: new Map(),
  };
  const ca = options.ca ?? (await createCertificateAuthority('azure-blob-sim-ca'));
  const serving = await issueServingCertificate(ca);
  const server = createHttpsServer({ key: serving.privateKey, cert: serving.certificate }, (req, res) => {
    serveBlob(state, req, res).catch((err: unknown) => {
      if (!res.headersSent) storageError(req, res, 500, 'InternalError', (err as Error).message);
    });
  });
  const listener = await listenOnLoopback(server);
  state.base = listener.url.replace('http://', 'https://');
  const container = (account: string, name: string) => {
    const found = state.containers.get(`${account}/${name}`);
    if (!found) throw new Error(`no simulated container ${account}/${name}`);
    return found;
  };
  return {
    endpoint: state.base,
    caPem: ca.certificate,
    createContainer: (account, name) => {
      if (!state.containers.has(`${account}/${name}`)) state.containers.set(`${account}/${name}`, new Map());
    },
    putBlob: (account, name, blobName, data) => {
      const now = new Date();
      container(account, name).set(blobName, {
        data: Buffer.from(data),
        etag: etagOf(state),
        created: now,
        lastModified: now,
      });
    },
    getBlob: (account, name, blobName) => state.containers.get(`${account}/${name}`)?.get(blobName)?.data,
    answerWith: (operation, answer) => {
      if (answer) state.answers.set(operation, answer);
      else state.answers.delete(operation);
    },
    ...faultVerbs(state.faults),
    calls: state.log.calls,
    count: (operation) => state.log.count(operation),
    clearCalls: () => state.log.clear(),
    close: () => listener.close(),
  };
}
