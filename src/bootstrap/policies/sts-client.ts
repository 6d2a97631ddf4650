/**
 * Replays a node's signed GetCallerIdentity to STS and reads the answer: no redirects (node's http
 * client follows none), one deadline that also covers waiting for a connection, and a bounded answer.
 * The node chose the headers, so nothing but STS's verdict on them is trusted.
 *
 * Connections are pooled. A new TLS connection per replay cost the event loop a full client
 * handshake for every joining node (docs/performance.md). Sharing them is safe because the node
 * cannot touch the framing: aws-sts-proof.ts refuses connection-level headers (Connection,
 * Transfer-Encoding, Upgrade, Expect, ...), line breaks and a body length that does not fit, and
 * this module drops any such header again and sets the method, the body and its length itself, so
 * each replay is exactly one request and one answer on its connection.
 *
 * Every replay that reaches STS is counted as call `GetCallerIdentity.replay` of cloud `aws`, apart
 * from the controller's own GetCallerIdentity: STS refusing a node's signature is `rejected`, which is
 * the node's fault, not STS failing.
 */
import type { Agent as HttpAgent } from 'node:http';
import {
  type CloudCallRecorder,
  type CloudCallResult,
  httpCallResult,
  noCloudCalls,
  secondsSince,
} from '../../cloud/metrics.ts';
import {
  InvalidInputError,
  TimeoutError,
  TooLargeError,
  UnauthenticatedError,
  UnavailableError,
} from '../../errors.ts';
import { fieldsOf } from '../../json-object.ts';
import { egressAgent } from '../../net/egress-proxy.ts';
import { type HttpsAnswer, httpsRequest, StaleConnectionError } from '../../net/https-client.ts';
import { type CallTicket, CircuitBreaker } from '../circuit-breaker.ts';
import { connectionHeaders, type StsReplayRequest } from './aws-sts-proof.ts';

/** Who STS says signed the request. */
export interface StsCaller {
  account: string;
  arn: string;
  userId: string;
}

const maxAnswerBytes = 64 * 1024;

function xmlText(xml: string, tag: string): string | undefined {
  const m = new RegExp(`<${tag}>([^<]*)</${tag}>`).exec(xml);
  if (!m) return undefined;
  return (m[1] as string)
    .replace(/&lt;/g, '<')
    .replace(/&gt;/g, '>')
    .replace(/&quot;/g, '"')
    .replace(/&apos;/g, "'")
    .replace(/&amp;/g, '&');
}

/** The JSON form STS answers to `Accept: application/json` (which the node may ask for in its proof). */
function jsonCallerIdentity(text: string): StsCaller | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return undefined;
  }
  const result = fieldsOf(fieldsOf(fieldsOf(parsed)['GetCallerIdentityResponse'])['GetCallerIdentityResult']);
  const { Account: account, Arn: arn, UserId: userId } = result;
  if (typeof account !== 'string' || !account || typeof arn !== 'string' || !arn) return undefined;
  return { account, arn, userId: typeof userId === 'string' ? userId : '' };
}

/** An STS error in the JSON form (`{"Error": {"Code", "Message"}}`) a signed `Accept` asks for. */
function jsonError(text: string): { code?: string; message?: string } {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return {};
  }
  const { Code: code, Message: message } = fieldsOf(fieldsOf(parsed)['Error']);
  return {
    ...(typeof code === 'string' ? { code: code.slice(0, 100) } : {}),
    ...(typeof message === 'string' ? { message: message.slice(0, 300) } : {}),
  };
}

/**
 * Parses a GetCallerIdentityResponse, XML or the JSON STS answers when the proof asked for it. A 200
 * that is neither (a proxy's page, a cut-off body) is STS (or the way to it) failing, not a verdict
 * on the proof: UnavailableError, `malformed-answer`.
 */
export function parseCallerIdentity(text: string): StsCaller {
  const result = /<GetCallerIdentityResult>([\s\S]*)<\/GetCallerIdentityResult>/.exec(text)?.[1];
  const account = result && xmlText(result, 'Account');
  const arn = result && xmlText(result, 'Arn');
  if (account && arn) return { account, arn, userId: (result && xmlText(result, 'UserId')) ?? '' };
  const json = jsonCallerIdentity(text);
  if (json) return json;
  throw new UnavailableError('STS answered 200 without a GetCallerIdentityResult (Account and Arn)', {
    details: { reason: 'malformed-answer' },
  });
}

/** At most this many connections to one STS endpoint: a join storm queues for them instead of opening hundreds. */
export const maxStsConnections = 64;

/** Idle pooled connections are closed after this long (or sooner when STS announces a shorter keep-alive). */
const idleConnectionMs = 30_000;

/** The `call` label of a replay; the SDK's own GetCallerIdentity is `GetCallerIdentity`. */
export const stsReplayCall = 'GetCallerIdentity.replay';

/** How a replay ended, once it was sent; unset while nothing reached STS. */
interface Outcome {
  result?: CloudCallResult;
}

/** Options of {@link StsClient}. */
export interface StsClientOptions {
  /** Deadline of one call, waiting for a connection included (default 5 s). */
  timeoutMs?: number;
  /** Connections to the endpoint at most (default {@link maxStsConnections}). */
  maxConnections?: number;
  /** Where each replay sent is counted (default: nowhere). */
  cloudCalls?: CloudCallRecorder;
  /** Pauses replays while STS fails every one (default: a breaker of its own, silent). */
  circuit?: CircuitBreaker;
}

/** Replays proofs to one STS endpoint (`https://sts.<region>.amazonaws.com` or the simulator) over pooled connections. */
export class StsClient {
  readonly #base: URL;
  readonly #agent: HttpAgent;
  readonly #timeoutMs: number;
  readonly #calls: CloudCallRecorder;
  readonly #circuit: CircuitBreaker;

  constructor(endpoint: string, options: StsClientOptions = {}) {
    this.#base = new URL(endpoint);
    this.#timeoutMs = options.timeoutMs ?? 5_000;
    this.#calls = options.cloudCalls ?? noCloudCalls;
    this.#circuit = options.circuit ?? new CircuitBreaker({ name: 'STS' });
    const pool = {
      keepAlive: true,
      maxSockets: options.maxConnections ?? maxStsConnections,
      // The most recently used connection first, so that the others idle out after a storm.
      scheduling: 'lifo' as const,
      timeout: idleConnectionMs,
    };
    this.#agent = egressAgent(this.#base.protocol, pool);
  }

  /**
   * Sends `replay` with its signed Host header; resolves to the caller, or throws
   * UnauthenticatedError (STS refused the signature), UnavailableError (STS unreachable or failing)
   * or TimeoutError. A pooled connection found closed is retried once on a new connection of its
   * own, not on the next pooled one, which may have idled out with it: GetCallerIdentity changes
   * nothing, and the proof is only spent after STS has answered. While STS has failed every replay
   * for a while, most replays are not sent: PausedCallError (circuit-breaker.ts).
   */
  async call(replay: StsReplayRequest['request']): Promise<StsCaller> {
    const ticket = this.#circuit.admit();
    // A timer cleared with the call, not AbortSignal.timeout: that one cannot be cancelled, so every
    // replay of a join storm would still fire it seconds later, building an abort event and its
    // DOMException for a call long answered.
    const expiry = new AbortController();
    const timer = setTimeout(() => expiry.abort(), this.#timeoutMs);
    const deadline = expiry.signal;
    const started = performance.now();
    // The stale connection's attempt is not counted: the replay never reached STS on it.
    const outcome: Outcome = {};
    try {
      try {
        return await this.#send(replay, deadline, this.#agent, outcome);
      } catch (err) {
        if (!(err instanceof StaleConnectionError)) throw err;
        return await this.#send(replay, deadline, false, outcome);
      }
    } finally {
      clearTimeout(timer);
      settle(ticket, outcome.result);
      if (outcome.result) {
        this.#calls.request('aws', stsReplayCall, outcome.result);
        this.#calls.duration('aws', stsReplayCall, secondsSince(started));
      }
    }
  }

  async #send(
    replay: StsReplayRequest['request'],
    deadline: AbortSignal,
    agent: HttpAgent | false,
    outcome: Outcome,
  ): Promise<StsCaller> {
    const base = this.#base;
    // The framing is ours whatever the parser let through: the length comes from the body we send.
    const headers: Record<string, string | string[]> = {};
    for (const [name, values] of Object.entries(replay.headers)) {
      if (!connectionHeaders.has(name) && name !== 'content-length') headers[name] = values;
    }
    headers['host'] = replay.headers['host']?.[0] ?? base.host;
    let answer: HttpsAnswer;
    try {
      answer = await httpsRequest({
        url: base,
        // The target as the node signed it, not normalised.
        path: replay.url,
        method: replay.method,
        headers,
        body: replay.body,
        agent,
        // Not the signed Host's name: the connection goes to this endpoint and must verify as it.
        servername: base.hostname,
        timeoutMs: this.#timeoutMs,
        maxBodyBytes: maxAnswerBytes,
        signal: deadline,
      });
    } catch (err) {
      throw this.#failure(err as Error, deadline, outcome);
    }
    return callerOf(answer, outcome);
  }

  /** The error a replay that got no usable answer ends with, counted unless nothing reached STS. */
  #failure(err: Error, deadline: AbortSignal, outcome: Outcome): Error {
    // Node refuses characters in a header or the path that the proof parser let through.
    if (err instanceof InvalidInputError) {
      return new UnauthenticatedError(`the proof cannot be replayed: ${(err.cause as Error).message}`);
    }
    const timedOut = deadline.aborted || err instanceof TimeoutError;
    const stale = !timedOut && err instanceof StaleConnectionError;
    // Nothing reached STS on a stale connection; any other failure before an answer is an error.
    if (!stale) outcome.result ??= 'error';
    if (timedOut) return new TimeoutError(`STS did not answer within ${this.#timeoutMs} ms`);
    if (stale) return err;
    if (err instanceof TooLargeError) {
      return new UnavailableError(`STS answered with more than ${maxAnswerBytes} bytes`);
    }
    return new UnavailableError(`cannot reach STS at ${this.#base.origin}: ${err.message}`, { cause: err });
  }
}

/**
 * Tells the circuit how a replay ended. STS answering, even with a refusal or `Throttling`, shows it
 * is up: STS throttles per account, and the account is the signer's, so anyone can have their own
 * replays throttled (tmp/redteam2 attack 1: an attacker's throttled account held the circuit open
 * for everyone). Only STS failing (5xx, no answer in time, no connection, a 200 that is no answer)
 * counts towards pausing it.
 */
function settle(ticket: CallTicket, result: CloudCallResult | undefined): void {
  if (result === undefined) ticket.release();
  else if (result === 'error') ticket.failed();
  else ticket.answered();
}

/** Reads STS's answer into the caller it names, or the error it means. */
function callerOf(answer: HttpsAnswer, outcome: Outcome): StsCaller {
  const text = answer.body.toString('utf8');
  const status = answer.status;
  if (status === 200) {
    try {
      const caller = parseCallerIdentity(text);
      outcome.result = 'ok';
      return caller;
    } catch (err) {
      outcome.result = 'error';
      throw err;
    }
  }
  const json = jsonError(text);
  const code = xmlText(text, 'Code') ?? json.code ?? `HTTP ${status}`;
  const message = xmlText(text, 'Message') ?? json.message ?? '';
  const what = `${code}${message ? `: ${message}` : ''}`;
  // STS answers Throttling with HTTP 400. Only a refusal (another 4xx) is the proof's fault; the
  // rest (throttling, 5xx, a redirect or another 2xx than 200) is STS failing, and the node retries.
  const result = code === 'Throttling' ? 'throttled' : httpCallResult(status);
  outcome.result = result === 'ok' ? 'error' : result;
  throw outcome.result === 'rejected'
    ? new UnauthenticatedError(what)
    : new UnavailableError(`STS failed (${what}); retry later`);
}
