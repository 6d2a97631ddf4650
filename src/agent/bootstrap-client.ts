/**
 * The node's side of the native bootstrap API (docs/bootstrap-api.md): one HTTPS call, its answer
 * classified. TLS trusts only the cluster CA bundle the node discovered or was given, never the
 * system roots. Network failures, 429 and 5xx come back as retryable errors; the caller decides
 * how long to keep trying.
 */
import { Agent, request } from 'node:https';
import {
  ConflictError,
  ForbiddenError,
  InvalidInputError,
  type KopsError,
  NotFoundError,
  RateLimitedError,
  TooLargeError,
  UnauthenticatedError,
  UnavailableError,
} from '../errors.ts';

/** The API version the client speaks. */
export const bootstrapApiVersion = 'bootstrap.kops-controller.io/v1';

/** The certificates and trust the server issued. */
export interface IssuedAnswer {
  status: 'issued';
  nodeName: string;
  instanceGroup?: string;
  certificates: Record<string, string>;
  caBundle: string;
  apiServer?: string;
}

/** The request waits for a human (or a policy) to decide. */
export interface PendingAnswer {
  status: 'pending';
  requestId: string;
  poll: string;
  reasons: string[];
}

/** The server's answer to a submission or a poll. */
export type BootstrapAnswer = IssuedAnswer | PendingAnswer;

/** The request was refused; `reasons` are every reason the deciding policy gave. */
export class DeniedError extends ForbiddenError {
  readonly reasons: string[];

  constructor(reasons: string[]) {
    super(`the bootstrap request was denied: ${reasons.length ? reasons.join('; ') : 'no reason given'}`, {
      details: { reasons },
    });
    this.reasons = reasons;
  }
}

/** Largest answer read: three certificates and a CA bundle fit many times over. */
const maxAnswerBytes = 1024 * 1024;

/** One HTTPS endpoint of a bootstrap server, trusted through a CA bundle. */
export class BootstrapClient {
  readonly #base: URL;
  readonly #ca: string;
  readonly #agent: Agent;
  readonly #timeoutMs: number;

  constructor(options: { server: string; caBundlePem: string; timeoutMs?: number }) {
    this.#base = new URL(options.server);
    this.#ca = options.caBundlePem;
    this.#agent = new Agent({ keepAlive: true, maxSockets: 1 });
    this.#timeoutMs = options.timeoutMs ?? 30_000;
  }

  /** `POST /v1/certificates` with the exact body bytes and the identity proof header, if any. */
  submit(body: Buffer, authorization: string | undefined, signal?: AbortSignal): Promise<BootstrapAnswer> {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (authorization) headers['authorization'] = authorization;
    return this.#call('POST', '/v1/certificates', headers, body, this.#timeoutMs, signal);
  }

  /** Long-polls a pending request's handle (`poll` from the pending answer) for up to `waitSeconds`. */
  poll(poll: string, waitSeconds: number, signal?: AbortSignal): Promise<BootstrapAnswer> {
    const url = new URL(poll, this.#base);
    if (url.origin !== this.#base.origin || !url.pathname.startsWith('/v1/requests/')) {
      throw new InvalidInputError(`the server answered with a foreign poll location "${poll}"`);
    }
    const path = `${url.pathname}?wait=${waitSeconds}`;
    return this.#call('GET', path, {}, undefined, this.#timeoutMs + waitSeconds * 1000, signal);
  }

  /** Closes kept-alive connections. */
  close(): void {
    this.#agent.destroy();
  }

  #call(
    method: string,
    path: string,
    headers: Record<string, string>,
    body: Buffer | undefined,
    timeoutMs: number,
    signal: AbortSignal | undefined,
  ): Promise<BootstrapAnswer> {
    const url = new URL(path, this.#base);
    return new Promise((resolve, reject) => {
      const req = request(
        url,
        {
          method,
          headers: { accept: 'application/json', ...headers },
          ca: this.#ca,
          agent: this.#agent,
          timeout: timeoutMs,
          ...(signal ? { signal } : {}),
        },
        (res) => {
          const chunks: Buffer[] = [];
          let size = 0;
          res.on('data', (chunk: Buffer) => {
            size += chunk.length;
            if (size > maxAnswerBytes) {
              req.destroy(new UnavailableError(`the answer exceeds ${maxAnswerBytes} bytes`));
              return;
            }
            chunks.push(chunk);
          });
          res.on('end', () => {
            try {
              resolve(answerOf(res.statusCode ?? 0, Buffer.concat(chunks), res.headers['retry-after']));
            } catch (err) {
              reject(err);
            }
          });
          res.on('error', (err) => reject(networkError(url, err)));
        },
      );
      req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
      req.on('error', (err) => reject(err instanceof UnavailableError ? err : networkError(url, err)));
      req.end(body);
    });
  }
}

function networkError(url: URL, err: Error): KopsError {
  const code = (err as NodeJS.ErrnoException).code;
  // A TLS verification failure will not fix itself: the server is not the one the CA vouches for.
  if (code && /CERT|SELF_SIGNED|ERR_TLS_CERT_ALTNAME|UNABLE_TO_VERIFY/.test(code)) {
    return new UnauthenticatedError(
      `the bootstrap server ${url.origin} is not trusted by the cluster CA (${code}): check --server and the CA pin`,
      { cause: err },
    );
  }
  return new UnavailableError(`cannot reach the bootstrap server ${url.origin}: ${err.message}`, {
    cause: err,
  });
}

interface ErrorBody {
  error?: { reason?: unknown; message?: unknown };
  status?: unknown;
  reasons?: unknown;
}

function parseJson(status: number, bytes: Buffer): ErrorBody & Record<string, unknown> {
  try {
    const value: unknown = JSON.parse(bytes.toString('utf8'));
    if (value && typeof value === 'object' && !Array.isArray(value))
      return value as ErrorBody & Record<string, unknown>;
  } catch {
    // fall through: a proxy's HTML error page, or a truncated answer
  }
  if (status >= 500 || status === 429) return {};
  throw new UnavailableError(`the bootstrap server answered ${status} with a body that is not a JSON object`);
}

function stringsOf(value: unknown): string[] {
  return Array.isArray(value) ? value.filter((v): v is string => typeof v === 'string') : [];
}

function messageOf(body: ErrorBody, status: number): string {
  const message = typeof body.error?.message === 'string' ? body.error.message : `HTTP ${status}`;
  const reason = typeof body.error?.reason === 'string' ? ` (${body.error.reason})` : '';
  return message + reason;
}

function issuedOf(body: Record<string, unknown>): IssuedAnswer {
  const certificates = body['certificates'];
  if (
    typeof body['nodeName'] !== 'string' ||
    typeof body['caBundle'] !== 'string' ||
    !certificates ||
    typeof certificates !== 'object' ||
    !Object.values(certificates).every((c) => typeof c === 'string')
  ) {
    throw new UnavailableError(
      'the bootstrap server answered "issued" without nodeName, certificates or caBundle',
    );
  }
  return {
    status: 'issued',
    nodeName: body['nodeName'],
    certificates: certificates as Record<string, string>,
    caBundle: body['caBundle'],
    ...(typeof body['instanceGroup'] === 'string' ? { instanceGroup: body['instanceGroup'] } : {}),
    ...(typeof body['apiServer'] === 'string' ? { apiServer: body['apiServer'] } : {}),
  };
}

function pendingOf(body: Record<string, unknown>): PendingAnswer {
  if (typeof body['requestId'] !== 'string' || typeof body['poll'] !== 'string') {
    throw new UnavailableError('the bootstrap server answered "pending" without requestId or poll');
  }
  return {
    status: 'pending',
    requestId: body['requestId'],
    poll: body['poll'],
    reasons: stringsOf(body['reasons']),
  };
}

/** Classifies one HTTP answer: the issued or pending answer, or the typed error it means. */
export function answerOf(status: number, bytes: Buffer, retryAfter?: string): BootstrapAnswer {
  const body = parseJson(status, bytes);
  if (status === 200) return issuedOf(body);
  if (status === 202) return pendingOf(body);
  if (status === 403 && body.status === 'denied') throw new DeniedError(stringsOf(body.reasons));
  const message = messageOf(body, status);
  switch (status) {
    case 401:
      throw new UnauthenticatedError(
        `the bootstrap server could not verify this node's identity: ${message}`,
      );
    case 403:
      throw new ForbiddenError(`the bootstrap server refused the request: ${message}`);
    case 404:
      throw new NotFoundError(`the bootstrap server does not know this request: ${message}`);
    case 409:
      throw new ConflictError(
        `a node of this name is already registered and Ready: ${message}; delete the Node or choose another --node-name`,
        { details: { reason: body.error?.reason } },
      );
    case 413:
      throw new TooLargeError(`the bootstrap server refused the request as too large: ${message}`);
    case 429:
      throw new RateLimitedError(`the bootstrap server is rate limiting: ${message}`, {
        details: { retryAfterSeconds: Number(retryAfter) || undefined },
      });
    default:
      if (status >= 500) throw new UnavailableError(`the bootstrap server failed: ${message}`);
      throw new InvalidInputError(`the bootstrap server rejected the request (${status}): ${message}`);
  }
}
