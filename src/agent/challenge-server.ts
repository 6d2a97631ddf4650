/**
 * The node's half of kops' callback challenge: a gRPC-over-TLS server that runs only while `join`
 * waits for its certificates. It presents a fresh self-signed `challenge-server.<cluster>`
 * certificate (sent in the request, so the controller accepts no other), replaced by another before
 * it runs out (a join may retry for longer than its hour), requires a client certificate chained to
 * the cluster CA with CN `kops-controller.<cluster>`, and answers each challenge id once: the id is
 * forgotten as soon as it is asked for, so a recorded exchange cannot be replayed and a second caller
 * learns nothing.
 */

import { randomBytes } from 'node:crypto';
import type { SecureContextOptions } from 'node:tls';
import { Server, ServerCredentials, type ServerUnaryCall, type sendUnaryData, status } from '@grpc/grpc-js';
import { ConfigError } from '../errors.ts';
import type { Logger } from '../log.ts';
import {
  type ChallengeClaim,
  type ChallengeRequestMessage,
  type ChallengeResponseMessage,
  challengeAnswer,
  challengeClientName,
  challengeIdBytes,
  challengeSecretBytes,
  defaultChallengePort,
} from '../protocol/challenge.ts';
import {
  type ChallengeCredential,
  challengeCertificateDue,
  challengeServerCertificate,
  type MadeAt,
} from '../protocol/challenge-certificates.ts';
import { callbackService } from '../protocol/challenge-grpc.ts';

/**
 * Where the node listens by default: every address, kops' port — IPv6 and IPv4 (kops' `:3987`), or
 * IPv4 only on a host without IPv6.
 */
export const defaultChallengeListens = [`[::]:${defaultChallengePort}`, `0.0.0.0:${defaultChallengePort}`];

export interface ChallengeServerOptions {
  clusterName: string;
  /** The cluster CA bundle (PEM) the controller's client certificate must chain to. */
  clusterCaPem: string;
  /** `host:port` to listen on (default `[::]:3987`, else `0.0.0.0:3987`; the dev cluster gives each node its own 127.0.0.x). */
  listen?: string;
  logger?: Logger;
  /** The wall clock the certificate is dated by (default the system's); tests move it. */
  now?: () => Date;
  /** Monotonic milliseconds, for the certificate's age (default `performance.now`). */
  monotonic?: () => number;
}

/** A running challenge server. */
export interface ChallengeListener {
  /** The address it listens on, as `host:port`. */
  readonly endpoint: string;
  /** A new one-shot challenge, to put into one bootstrap request. */
  createChallenge(): ChallengeClaim;
  /** Stops listening and forgets every challenge. */
  stop(): Promise<void>;
}

/** Binds the first address of `listens` that works; `host:port` of the one bound. */
async function bindFirst(server: Server, listens: string[], tls: ServerCredentials): Promise<string> {
  let failure: Error | undefined;
  for (const listen of listens) {
    try {
      const port = await new Promise<number>((resolve, reject) =>
        server.bindAsync(listen, tls, (err, bound) => (err ? reject(err) : resolve(bound))),
      );
      return `${listen.slice(0, listen.lastIndexOf(':'))}:${port}`;
    } catch (err) {
      failure = err as Error;
    }
  }
  server.forceShutdown();
  throw new ConfigError(
    `cannot listen for the callback challenge on ${listens.join(' or ')}: ${failure?.message}; pass another --challenge-listen`,
    { cause: failure },
  );
}

/** The TLS context options that present `own` and verify callers against the cluster CA `ca`. */
function contextOf(ca: Buffer, own: ChallengeCredential): SecureContextOptions {
  return { ca, cert: [Buffer.from(own.certificatePem)], key: [Buffer.from(own.keyPem)] };
}

/**
 * ServerCredentials.createSsl(ca, [own], true) whose certificate can be replaced while the server
 * listens: grpc-js passes updated context options to its listening sockets (the mechanism of its own
 * certificate providers), and every connection made afterwards gets them. The controller opens one
 * connection per callback, so a challenge made after {@link present} is answered with `own`.
 */
class RenewableServerTls extends ServerCredentials {
  readonly #ca: Buffer;

  constructor(ca: Buffer, own: ChallengeCredential) {
    super({ requestCert: true, rejectUnauthorized: true }, contextOf(ca, own));
    this.#ca = ca;
  }

  present(own: ChallengeCredential): void {
    this.updateSecureContextOptions(contextOf(this.#ca, own));
  }

  _equals(other: ServerCredentials): boolean {
    return other === this;
  }
}

type Handler = (
  call: ServerUnaryCall<ChallengeRequestMessage, ChallengeResponseMessage>,
  callback: sendUnaryData<ChallengeResponseMessage>,
) => void;

/** Starts the node's challenge server (see the module comment). */
export async function startChallengeServer(options: ChallengeServerOptions): Promise<ChallengeListener> {
  const clocks = (): MadeAt => ({
    wallMs: (options.now?.() ?? new Date()).getTime(),
    monotonicMs: options.monotonic?.() ?? performance.now(),
  });
  let madeAt = clocks();
  let own = challengeServerCertificate(options.clusterName, new Date(madeAt.wallMs));
  const required = challengeClientName(options.clusterName);
  const secrets = new Map<string, Buffer>();
  const challenge: Handler = (call, callback) => {
    // The TLS layer verified the chain to the cluster CA; only the controller's name may ask.
    const peer = call.getAuthContext()?.sslPeerCertificate;
    if (peer?.subject?.CN !== required) {
      options.logger?.warn(
        { peer: peer?.subject?.CN },
        'challenge refused: the caller is not the controller',
      );
      callback({ code: status.UNAUTHENTICATED, details: 'certificate subjects did not match' });
      return;
    }
    const id = call.request.challenge_id;
    if (!id) {
      callback({ code: status.INVALID_ARGUMENT, details: 'challenge_id is required' });
      return;
    }
    const secret = secrets.get(id);
    // Answered once: a replay, or a second caller, finds nothing.
    secrets.delete(id);
    if (!secret) {
      callback({ code: status.NOT_FOUND, details: 'challenge was not found' });
      return;
    }
    callback(null, { challenge_response: challengeAnswer(secret, call.request.challenge_random) });
  };
  const server = new Server();
  server.addService(callbackService().service, { Challenge: challenge });
  const tls = new RenewableServerTls(Buffer.from(options.clusterCaPem), own);
  const endpoint = await bindFirst(server, options.listen ? [options.listen] : defaultChallengeListens, tls);
  return {
    endpoint,
    createChallenge() {
      // Replaced before little of it remains or after a step of the clock (a join at boot, before
      // chrony's first sync), and presented from now on: the challenge carries the certificate the
      // controller will be shown, the only one it accepts.
      const now = clocks();
      if (challengeCertificateDue(madeAt, own.notAfter, now)) {
        madeAt = now;
        own = challengeServerCertificate(options.clusterName, new Date(now.wallMs));
        tls.present(own);
      }
      const challengeId = randomBytes(challengeIdBytes).toString('hex');
      const secret = randomBytes(challengeSecretBytes);
      secrets.set(challengeId, secret);
      return { endpoint, serverCertificatePem: own.certificatePem, challengeId, secret };
    },
    stop() {
      secrets.clear();
      return new Promise<void>((resolve) => {
        server.tryShutdown(() => resolve());
        // A caller that holds its connection open does not keep the node waiting.
        setTimeout(() => server.forceShutdown(), 1000).unref();
      });
    },
  };
}
