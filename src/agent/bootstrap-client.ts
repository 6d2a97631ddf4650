/**
 * The node's side of the native bootstrap API (docs/bootstrap-api.md): one HTTPS call, its answer
 * classified. TLS trusts only the CA bundle the node pinned (or was given), never the system roots.
 * A dependency fault (network error, 408, 429, 5xx) comes back retryable with its Retry-After; any
 * other answer is final (src/agent/http-answer.ts). The caller decides how long to keep trying.
 */
import type { Agent } from 'node:https';
import {
  ForbiddenError,
  InvalidInputError,
  type KopsError,
  TooLargeError,
  UnauthenticatedError,
  UnavailableError,
} from '../errors.ts';
import { printable } from '../log.ts';
import { egressAgent } from '../net/egress-proxy.ts';
import { type HttpsAnswer, httpsRequest, TlsVerificationError } from '../net/https-client.ts';
import { endpointBase } from './endpoint-url.ts';
import { answerError, jsonObjectOf } from './http-answer.ts';
import { clockOffsetNote, clockValidityFault, serverClockOffsetMs } from './node-clock.ts';

/**
 * The certificates the server issued. Its `caBundle` is not read: the node keeps trusting only the
 * CAs it pinned, whatever an answer adds.
 */
export interface IssuedAnswer {
  status: 'issued';
  nodeName: string;
  instanceGroup?: string;
  certificates: Record<string, string>;
  apiServer?: string;
  /**
   * How far the server's clock was ahead of this machine's (negative: behind) when it answered, from
   * its `Date` header, so that a certificate refused for its dates can say which clock is off.
   */
  serverClockOffsetMs?: number;
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

/**
 * The request was refused; `reasons` are every reason the deciding policy gave, as printable text.
 * `clockNote` (node-clock.ts) follows them when this machine's clock and the server's disagree: a
 * proof dated by a wrong clock, or a callback certificate out of its dates on the controller's clock,
 * is denied for it, and the server's reason does not always say so (`the callback challenge failed`).
 */
export class DeniedError extends ForbiddenError {
  readonly reasons: string[];

  constructor(reasons: string[], clockNote?: string) {
    super(
      `the bootstrap request was denied: ${reasons.length ? reasons.join('; ') : 'no reason given'}${clockNote ? `; ${clockNote}` : ''}`,
      { details: { reasons } },
    );
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

  /** `server` is the bootstrap endpoint; its path, if any, prefixes every call (endpoint-url.ts). */
  constructor(options: { server: string; caBundlePem: string; timeoutMs?: number }) {
    this.#base = endpointBase(new URL(options.server));
    this.#ca = options.caBundlePem;
    this.#agent = egressAgent('https:', { keepAlive: true, maxSockets: 1 });
    this.#timeoutMs = options.timeoutMs ?? 30_000;
  }

  /** `POST /v1/certificates` with the exact body bytes and the identity proof header, if any. */
  submit(body: Buffer, authorization: string | undefined, signal?: AbortSignal): Promise<BootstrapAnswer> {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (authorization) headers['authorization'] = authorization;
    const url = new URL('v1/certificates', this.#base);
    return this.#call('POST', url, headers, body, this.#timeoutMs, signal);
  }

  /** Long-polls a pending request's handle (`poll` from the pending answer) for up to `waitSeconds`. */
  poll(poll: string, waitSeconds: number, signal?: AbortSignal): Promise<BootstrapAnswer> {
    const url = this.#pollUrl(poll);
    url.searchParams.set('wait', String(waitSeconds));
    return this.#call('GET', url, {}, undefined, this.#timeoutMs + waitSeconds * 1000, signal);
  }

  /**
   * Where a poll handle is. The server names it from its own root (`/v1/requests/<id>`), which behind
   * a path prefix is under the base; only a handle of this endpoint is followed, never another host.
   */
  #pollUrl(poll: string): URL {
    let url: URL;
    try {
      url = new URL(poll, this.#base);
    } catch {
      throw new InvalidInputError(
        `the server answered with a poll location that is not a URL: "${printable(poll, 80)}"`,
      );
    }
    const folder = [`${this.#base.pathname}v1/requests/`, '/v1/requests/'].find((path) =>
      url.pathname.startsWith(path),
    );
    if (url.origin !== this.#base.origin || !folder) {
      throw new InvalidInputError(
        `the server answered with a foreign poll location "${printable(poll, 80)}"`,
      );
    }
    return new URL(`v1/requests/${url.pathname.slice(folder.length)}`, this.#base);
  }

  /** Closes kept-alive connections. */
  close(): void {
    this.#agent.destroy();
  }

  async #call(
    method: string,
    url: URL,
    headers: Record<string, string>,
    body: Buffer | undefined,
    timeoutMs: number,
    signal: AbortSignal | undefined,
  ): Promise<BootstrapAnswer> {
    let answer: HttpsAnswer;
    try {
      answer = await httpsRequest({
        url,
        method,
        headers: { accept: 'application/json', ...headers },
        body,
        ca: this.#ca,
        agent: this.#agent,
        timeoutMs,
        maxBodyBytes: maxAnswerBytes,
        signal,
      });
    } catch (err) {
      throw await transportError(url, err as Error, this.#ca);
    }
    // The server's clock, read as the answer arrives: its Retry-After date is on that clock, and a
    // denial or a certificate refused for its dates may be this machine's clock being off.
    const date = answer.headers['date'];
    const offsetMs = serverClockOffsetMs(date);
    try {
      const result = answerOf(
        `${method} ${url}`,
        answer.status,
        answer.body,
        answer.headers['retry-after'],
        date,
      );
      return result.status === 'issued' && offsetMs !== undefined
        ? { ...result, serverClockOffsetMs: offsetMs }
        : result;
    } catch (err) {
      const note = clockOffsetNote(offsetMs);
      if (err instanceof DeniedError && note) throw new DeniedError(err.reasons, note);
      throw err;
    }
  }
}

async function transportError(url: URL, err: Error, caBundlePem: string): Promise<KopsError> {
  if (err instanceof TlsVerificationError) {
    // Out of its dates by this machine's clock, which chrony may step a moment later: a fault.
    const dated = await clockValidityFault(err.code, {
      url,
      caBundlePem,
      peer: `the bootstrap server ${url.origin}`,
      viaProxy: true,
    });
    if (dated) return dated;
    // Any other verification failure will not fix itself: the server is not the one the CA vouches for.
    return new UnauthenticatedError(
      `the bootstrap server ${url.origin} is not trusted by the cluster CA ` +
        `(${err.code}): check --server and the CA pin`,
    );
  }
  // An answer too long to be one was cut off in transit; another attempt may get the real one.
  if (err instanceof TooLargeError) return new UnavailableError(err.message);
  return new UnavailableError(`cannot reach the bootstrap server ${url.origin}: ${err.message}`, {
    cause: err,
  });
}

/** The reasons of a denial or a pending answer, as they may reach a terminal: no control characters. */
function reasonsOf(value: unknown): string[] {
  return Array.isArray(value)
    ? value.filter((v): v is string => typeof v === 'string').map((reason) => printable(reason))
    : [];
}

function issuedOf(body: Record<string, unknown>): IssuedAnswer {
  const certificates = body['certificates'];
  if (
    typeof body['nodeName'] !== 'string' ||
    !certificates ||
    typeof certificates !== 'object' ||
    !Object.values(certificates).every((c) => typeof c === 'string')
  ) {
    throw new UnavailableError('the bootstrap server answered "issued" without nodeName or certificates');
  }
  return {
    status: 'issued',
    nodeName: body['nodeName'],
    certificates: certificates as Record<string, string>,
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
    reasons: reasonsOf(body['reasons']),
  };
}

/**
 * Classifies the answer to `request` ("POST https://…/v1/certificates"): the issued or pending
 * answer, or the typed error it means (a denial with every reason the policy gave). `date` is the
 * answer's `Date`, the clock a Retry-After date is read on.
 */
export function answerOf(
  request: string,
  status: number,
  bytes: Buffer,
  retryAfter?: string,
  date?: string,
): BootstrapAnswer {
  const body = jsonObjectOf(bytes);
  if (status === 200 || status === 202) {
    // A success without the API's JSON is a broken answer in transit (a truncating proxy): try again.
    if (!body)
      throw new UnavailableError(`${request} answered ${status} with a body that is not a JSON object`);
    return status === 200 ? issuedOf(body) : pendingOf(body);
  }
  if (status === 403 && body?.['status'] === 'denied') throw new DeniedError(reasonsOf(body['reasons']));
  const alreadyRegistered =
    status === 409 && (body?.['error'] as { reason?: unknown })?.reason === 'node-already-registered';
  throw answerError(
    request,
    status,
    bytes,
    retryAfter,
    alreadyRegistered
      ? 'a Ready node of this name is registered: delete the Node or choose another --node-name'
      : undefined,
    date,
  );
}
