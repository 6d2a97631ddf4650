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
import {
  type ClientRequest,
  Agent as HttpAgent,
  request as httpRequest,
  type IncomingMessage,
} from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import {
  type CloudCallRecorder,
  type CloudCallResult,
  httpCallResult,
  noCloudCalls,
  secondsSince,
} from '../../cloud/metrics.ts';
import { TimeoutError, UnauthenticatedError, UnavailableError } from '../../errors.ts';
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

/** Parses a GetCallerIdentityResponse document; throws UnauthenticatedError when it is not one. */
export function parseCallerIdentity(xml: string): StsCaller {
  const result = /<GetCallerIdentityResult>([\s\S]*)<\/GetCallerIdentityResult>/.exec(xml)?.[1];
  const account = result && xmlText(result, 'Account');
  const arn = result && xmlText(result, 'Arn');
  if (!account || !arn) throw new UnauthenticatedError('STS answered without a GetCallerIdentityResult');
  return { account, arn, userId: (result && xmlText(result, 'UserId')) ?? '' };
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

/** A pooled connection that the server had already closed when a replay was written to it. */
class StaleConnectionError extends Error {}

/** Options of {@link StsClient}. */
export interface StsClientOptions {
  /** Deadline of one call, waiting for a connection included (default 5 s). */
  timeoutMs?: number;
  /** Connections to the endpoint at most (default {@link maxStsConnections}). */
  maxConnections?: number;
  /** Where each replay sent is counted (default: nowhere). */
  cloudCalls?: CloudCallRecorder;
}

/** Replays proofs to one STS endpoint (`https://sts.<region>.amazonaws.com` or the simulator) over pooled connections. */
export class StsClient {
  readonly #base: URL;
  readonly #agent: HttpAgent;
  readonly #timeoutMs: number;
  readonly #calls: CloudCallRecorder;

  constructor(endpoint: string, options: StsClientOptions = {}) {
    this.#base = new URL(endpoint);
    this.#timeoutMs = options.timeoutMs ?? 5_000;
    this.#calls = options.cloudCalls ?? noCloudCalls;
    const pool = {
      keepAlive: true,
      maxSockets: options.maxConnections ?? maxStsConnections,
      // The most recently used connection first, so that the others idle out after a storm.
      scheduling: 'lifo' as const,
      timeout: idleConnectionMs,
    };
    this.#agent = this.#base.protocol === 'https:' ? new HttpsAgent(pool) : new HttpAgent(pool);
  }

  /**
   * Sends `replay` with its signed Host header; resolves to the caller, or throws
   * UnauthenticatedError (STS refused the signature), UnavailableError (STS unreachable or failing)
   * or TimeoutError. A pooled connection found closed is retried once on a new connection of its
   * own, not on the next pooled one, which may have idled out with it: GetCallerIdentity changes
   * nothing, and the proof is only spent after STS has answered.
   */
  async call(replay: StsReplayRequest['request']): Promise<StsCaller> {
    const deadline = AbortSignal.timeout(this.#timeoutMs);
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
      if (outcome.result) {
        this.#calls.request('aws', stsReplayCall, outcome.result);
        this.#calls.duration('aws', stsReplayCall, secondsSince(started));
      }
    }
  }

  #send(
    replay: StsReplayRequest['request'],
    deadline: AbortSignal,
    agent: HttpAgent | false,
    outcome: Outcome,
  ): Promise<StsCaller> {
    const base = this.#base;
    const send = base.protocol === 'https:' ? httpsRequest : httpRequest;
    // The framing is ours whatever the parser let through: the length comes from the body we send.
    const headers: Record<string, string | string[]> = {};
    for (const [name, values] of Object.entries(replay.headers)) {
      if (!connectionHeaders.has(name) && name !== 'content-length') headers[name] = values;
    }
    headers['host'] = replay.headers['host']?.[0] ?? base.host;
    return new Promise<StsCaller>((resolve, reject) => {
      let answered = false;
      const fail = (err: NodeJS.ErrnoException) => {
        const stale = !deadline.aborted && req.reusedSocket && !answered && err.code === 'ECONNRESET';
        // Nothing reached STS on a stale connection; any other failure before an answer is an error.
        if (!stale) outcome.result ??= 'error';
        if (deadline.aborted) {
          reject(new TimeoutError(`STS did not answer within ${this.#timeoutMs} ms`));
        } else if (err instanceof UnavailableError) {
          reject(err);
        } else if (stale) {
          reject(new StaleConnectionError(err.message));
        } else {
          reject(new UnavailableError(`cannot reach STS at ${base.origin}: ${err.message}`, { cause: err }));
        }
      };
      const options = {
        protocol: base.protocol,
        hostname: base.hostname,
        port: base.port,
        method: replay.method,
        path: replay.url,
        headers,
        agent,
        signal: deadline,
        ...(base.protocol === 'https:' ? { servername: base.hostname } : {}),
      };
      let req: ClientRequest;
      try {
        req = send(options, (res) => {
          answered = true;
          res.on('error', fail);
          readAnswer(res, (err) => req.destroy(err), outcome).then(resolve, reject);
        });
      } catch (err) {
        // Node refuses characters in a header or the path that the proof parser let through.
        reject(new UnauthenticatedError(`the proof cannot be replayed: ${(err as Error).message}`));
        return;
      }
      req.on('error', fail);
      req.end(replay.body);
    });
  }
}

/**
 * Reads STS's answer into the caller it names, or the error it means. More than
 * {@link maxAnswerBytes} is cut off through `abort`, which destroys the connection.
 */
function readAnswer(res: IncomingMessage, abort: (err: Error) => void, outcome: Outcome): Promise<StsCaller> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    res.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > maxAnswerBytes) {
        abort(new UnavailableError(`STS answered with more than ${maxAnswerBytes} bytes`));
        return;
      }
      chunks.push(chunk);
    });
    res.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      const status = res.statusCode ?? 0;
      if (status === 200) {
        try {
          const caller = parseCallerIdentity(text);
          outcome.result = 'ok';
          resolve(caller);
        } catch (err) {
          outcome.result = 'error';
          reject(err);
        }
        return;
      }
      const code = xmlText(text, 'Code') ?? `HTTP ${status}`;
      const message = xmlText(text, 'Message') ?? '';
      const what = `${code}${message ? `: ${message}` : ''}`;
      // STS answers Throttling with HTTP 400. Only a refusal (another 4xx) is the proof's fault; the
      // rest (throttling, 5xx, a redirect or another 2xx than 200) is STS failing, and the node retries.
      const result = code === 'Throttling' ? 'throttled' : httpCallResult(status);
      outcome.result = result === 'ok' ? 'error' : result;
      reject(
        outcome.result === 'rejected'
          ? new UnauthenticatedError(what)
          : new UnavailableError(`STS failed (${what}); retry later`),
      );
    });
  });
}
