/**
 * The project's one HTTP client, for the calls it makes to other parties: the node to the bootstrap
 * server, the bootstrap server to STS, a webhook and the API server. One request, one answer read
 * whole into memory up to a limit, one deadline, and every way it can fail as one typed error, so
 * that each caller only decides what an answer's status means and words the failure for its reader.
 *
 * - The deadline covers the whole exchange: waiting for a pooled connection, the handshake, and the
 *   answer to its last byte. A peer that answers slowly is as unusable as one that never answers.
 * - An answer longer than the limit is cut off and its connection destroyed: nothing from a remote
 *   party is buffered without bound.
 * - Any status is an answer, returned, not thrown: what a 404 or a 503 means is the caller's call.
 * - No redirect is followed: a caller that trusts one endpoint never talks to another.
 * - A body is framed by its length, whatever the method and whatever length the caller's headers say.
 *
 * The messages of the errors say what happened; the caller says to whom.
 */
import {
  type Agent as HttpAgent,
  request as httpRequest,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type OutgoingHttpHeaders,
} from 'node:http';
import { request as httpsRequestOf } from 'node:https';
import {
  ForbiddenError,
  InvalidInputError,
  type KopsErrorOptions,
  TimeoutError,
  TooLargeError,
  UnavailableError,
} from '../errors.ts';
import { egressAgent, proxyFor, sharedEgressAgent } from './egress-proxy.ts';
import { isTlsVerificationFailure } from './tls-verification.ts';

/** One request. */
export interface HttpsRequest {
  /** `https://…` (or `http://…`, for a simulator); its path and query are the target unless `path` is given. */
  url: URL;
  /** The request target exactly as sent, when it must not be normalised (a replayed signed request). */
  path?: string;
  /** Default GET. */
  method?: string;
  headers?: OutgoingHttpHeaders;
  body?: Buffer | string;
  /** PEM CA bundle the server's certificate must chain to (instead of the system roots). */
  ca?: string;
  /** False only where the caller verifies what it received by other means (pinned discovery). */
  rejectUnauthorized?: boolean;
  /** The TLS server name, when the Host header names another (a replayed request). */
  servername?: string;
  /** `user:password` basic credentials, as a kubeconfig may give them. */
  auth?: string;
  /**
   * A pooled agent (made with egress-proxy.ts `egressAgent`, so that it honours the egress proxy), or
   * false for a connection of this request's own; default Node's global agent. A request the egress
   * proxy carries (egress-proxy.ts `proxyFor`) without an agent of its caller's goes through a tunnel.
   */
  agent?: HttpAgent | false;
  /** The deadline of the whole exchange. */
  timeoutMs: number;
  /** The longest answer body read. */
  maxBodyBytes: number;
  signal?: AbortSignal;
}

/** The answer, whatever its status. */
export interface HttpsAnswer {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

/** The server's certificate did not verify against the trusted CAs: final, not a network fault. */
export class TlsVerificationError extends ForbiddenError {
  /** OpenSSL's or Node's code, e.g. `SELF_SIGNED_CERT_IN_CHAIN`. */
  readonly code: string;

  constructor(code: string, options?: KopsErrorOptions) {
    super(`the server's certificate does not verify (${code})`, options);
    this.code = code;
  }
}

/**
 * A kept-alive connection the server had already closed when the request was written to it: nothing
 * was answered, and a request that changes nothing may be sent again on a new connection.
 */
export class StaleConnectionError extends UnavailableError {}

/** Node's options for `request`: undefined ones are Node's defaults (the global agent, the system roots, verification on). */
function requestOptionsOf(request: HttpsRequest) {
  const { url } = request;
  return {
    protocol: url.protocol,
    // The brackets of an IPv6 literal belong to the URL, not to the address.
    hostname: url.hostname.replace(/^\[(.*)\]$/, '$1'),
    port: url.port,
    path: request.path ?? `${url.pathname}${url.search}`,
    method: request.method ?? 'GET',
    headers: framed(request),
    agent: agentOf(request),
    ca: request.ca,
    rejectUnauthorized: request.rejectUnauthorized,
    servername: request.servername,
    auth: request.auth,
  };
}

/** The caller's agent; else, when the egress proxy carries the request, a tunnelling one; else Node's. */
function agentOf(request: HttpsRequest): HttpAgent | false | undefined {
  if (request.agent || proxyFor(request.url) === undefined) return request.agent;
  return request.agent === false
    ? egressAgent(request.url.protocol)
    : sharedEgressAgent(request.url.protocol);
}

/**
 * The request's headers with a body framed by its length, whatever the method: Node's client sends a
 * GET's or a DELETE's body with neither a length nor chunking, and on a kept-alive connection the
 * server would read those bytes as the start of the next request, someone else's.
 */
function framed(request: HttpsRequest): OutgoingHttpHeaders {
  const headers = request.headers ?? {};
  // No body bytes, nothing to frame (a GET's empty body stays without a length, as Node sends it).
  if (request.body === undefined || request.body.length === 0) return headers;
  return { ...headers, 'content-length': Buffer.byteLength(request.body) };
}

/** Reads an answer's body whole, up to `maxBodyBytes`; `stop` ends the exchange when it is longer. */
function readAnswer(
  res: IncomingMessage,
  maxBodyBytes: number,
  handlers: { stop(err: Error): void; done(answer: HttpsAnswer): void; fail(err: Error): void },
): void {
  const chunks: Buffer[] = [];
  let size = 0;
  let over = false;
  res.on('data', (chunk: Buffer) => {
    if (over) return;
    size += chunk.length;
    if (size <= maxBodyBytes) return void chunks.push(chunk);
    over = true;
    chunks.length = 0;
    handlers.stop(new TooLargeError(`the answer exceeds ${maxBodyBytes} bytes`));
  });
  // An answer that arrived whole in one read crosses the limit only as it ends: it stays refused.
  res.on('end', () => {
    if (!over)
      handlers.done({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks, size) });
  });
  res.on('error', handlers.fail);
}

/**
 * Sends one request and reads its answer. Resolves to the answer for any status; rejects with
 * TimeoutError (deadline), TooLargeError (answer over the limit; the connection is destroyed),
 * TlsVerificationError, StaleConnectionError, UnavailableError (any other network failure),
 * InvalidInputError (Node refuses to send the method, path or headers), or, as soon as `signal`
 * aborts, an AbortError whose cause is the signal's reason (the request is then destroyed).
 */
export function httpsRequest(request: HttpsRequest): Promise<HttpsAnswer> {
  const send = request.url.protocol === 'http:' ? httpRequest : httpsRequestOf;
  return new Promise<HttpsAnswer>((resolve, reject) => {
    const { signal } = request;
    // Node would still open the connection for a request whose signal has already aborted.
    if (signal?.aborted) {
      reject(abortErrorOf(signal));
      return;
    }
    // Set before destroying the request, so that whichever error event comes first is read as this.
    let failure: Error | undefined;
    let answered = false;
    let timer: NodeJS.Timeout | undefined;
    // At once, whatever the request waits for: Node reports an abort only once the request has a
    // socket, and one that waits for a tunnel through the egress proxy has none until the proxy answers.
    const onAbort = () => stop(abortErrorOf(signal as AbortSignal));
    const settled = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    };
    const fail = (err: NodeJS.ErrnoException) => {
      settled();
      reject(failure ?? classify(err, request, req.reusedSocket && !answered));
    };
    const stop = (err: Error) => {
      failure ??= err;
      settled();
      reject(failure);
      // Without the error: the answer may have ended already and its socket gone back to the agent's
      // pool, where an error event would find no listener and end the process.
      req.destroy();
    };
    const done = (answer: HttpsAnswer) => {
      settled();
      resolve(answer);
    };
    let req: ReturnType<typeof send>;
    try {
      req = send(requestOptionsOf(request), (res) => {
        answered = true;
        readAnswer(res, request.maxBodyBytes, { stop, done, fail });
      });
    } catch (err) {
      // Node checks the method, the path and each header before anything is sent.
      reject(new InvalidInputError(`the request cannot be sent: ${(err as Error).message}`, { cause: err }));
      return;
    }
    timer = setTimeout(
      () => stop(new TimeoutError(`no answer within ${request.timeoutMs} ms`)),
      request.timeoutMs,
    );
    req.on('close', settled);
    req.on('error', fail);
    signal?.addEventListener('abort', onAbort, { once: true });
    req.end(request.body);
  });
}

/** The error an abort of `signal` rejects with: Node's AbortError, its cause the signal's reason. */
function abortErrorOf(signal: AbortSignal): Error {
  return Object.assign(new Error('The operation was aborted', { cause: signal.reason }), {
    name: 'AbortError',
    code: 'ABORT_ERR',
  });
}

/** The typed error for a failed exchange that neither the deadline nor the size limit ended. */
function classify(
  err: NodeJS.ErrnoException,
  request: HttpsRequest,
  unansweredOnReusedSocket: boolean,
): Error {
  if (err.name === 'AbortError' && request.signal?.aborted) return err;
  if (isTlsVerificationFailure(err)) return new TlsVerificationError(err.code as string, { cause: err });
  if (unansweredOnReusedSocket && err.code === 'ECONNRESET') {
    return new StaleConnectionError(`the kept-alive connection was closed by the server (${err.message})`, {
      cause: err,
    });
  }
  return new UnavailableError(err.message, { cause: err });
}
