/**
 * The controller's half of kops' callback challenge: before anything is issued to a node whose
 * deciding policy named a challenge endpoint (`NodeFacts.challengeEndpoint`, an address the cloud
 * reports for the instance — never one from the request), dial it over TLS as
 * `kops-controller.<cluster>` with a one-hour client certificate from the cluster CA, accept only the
 * server certificate the request carried (chained to it as the only root, named
 * `challenge-server.<cluster>`, and byte-for-byte that certificate), send a fresh nonce and compare
 * the answer with sha256(secret || nonce) in constant time, within a deadline.
 *
 * Outcomes: a node that answered, or presented a certificate, and got it wrong is refused
 * ({@link CallbackRefusedError}: nothing is issued, the request is a denial); a node that could not
 * be reached or did not answer in time is a fault (UnavailableError: the node is told to retry with
 * a fresh challenge), since its listener may not be up yet and no decision about it was made.
 *
 * The egress proxy is decided as for every other client (src/net/egress-proxy.ts `proxyFor`, for
 * `https://<endpoint>`, as grpc-go decides it), not by grpc-js, whose own decision reads only the
 * lower-case variables, knows IPv4 CIDRs only, does not exempt loopback and writes an IPv6 CONNECT
 * target without brackets; its `grpc.http_connect_target` would write that same malformed target and
 * speaks to an `http://` proxy only, and it takes no connection of ours. So a proxied challenge dials a
 * one-call forwarder on 127.0.0.1 whose connections are this module's CONNECT tunnels (`openTunnel`)
 * to the node; TLS, with the pinned certificate, still runs end to end with the node.
 */
import { randomBytes, X509Certificate } from 'node:crypto';
import { createServer, type Socket } from 'node:net';
import { checkServerIdentity, type PeerCertificate } from 'node:tls';
import { type Client, credentials, type ServiceError, status } from '@grpc/grpc-js';
import { ForbiddenError, UnavailableError } from '../errors.ts';
import { openTunnel, type ProxyEnvironment, proxyFor } from '../net/egress-proxy.ts';
import type { CertificateAuthority } from '../pki/ca.ts';
import { decodePem } from '../pki/pem.ts';
import {
  answerMatches,
  type ChallengeClaim,
  type ChallengeRequestMessage,
  type ChallengeResponseMessage,
  challengeAnswer,
  challengeNonceBytes,
  challengeServerName,
} from '../protocol/challenge.ts';
import {
  type ChallengeCredential,
  challengeCertificateDue,
  challengeClientCertificate,
  type MadeAt,
} from '../protocol/challenge-certificates.ts';
import { callbackService } from '../protocol/challenge-grpc.ts';

/** The node failed the challenge: a denial. The message is for the operator (audit), not the node. */
export class CallbackRefusedError extends ForbiddenError {
  constructor(message: string) {
    super(message, { reason: 'callback-failed' });
  }
}

/** Runs one callback challenge against `endpoint`; resolves only when the node answered correctly. */
export interface CallbackChallenger {
  challenge(endpoint: string, claim: ChallengeClaim): Promise<void>;
}

export interface GrpcChallengerOptions {
  /** The cluster CA: it signs the client certificate the nodes require. */
  ca: CertificateAuthority;
  clusterName: string;
  /** Dial, handshake and answer, all within this (default 10 s). */
  timeoutMs?: number;
  /** The wall clock the client certificate is dated by (default the system's). */
  now?: () => Date;
  /** Monotonic milliseconds, for the client certificate's age (default `performance.now`). */
  monotonic?: () => number;
  /** The environment the egress-proxy decision reads (default `process.env`). */
  env?: ProxyEnvironment;
}

/** The egress proxy a challenge to `endpoint` (`host:port`, `[v6]:port`) goes through, or undefined: direct. */
export function challengeProxy(endpoint: string, env?: ProxyEnvironment): URL | undefined {
  return proxyFor(new URL(`https://${endpoint}`), env);
}

/** gRPC statuses a node's server sends when it refuses or does not know the challenge. */
const refusals = new Set<number>([
  status.NOT_FOUND,
  status.INVALID_ARGUMENT,
  status.UNAUTHENTICATED,
  status.PERMISSION_DENIED,
  status.UNIMPLEMENTED,
]);

/** The controller's callback client over gRPC (see the module comment). */
export class GrpcCallbackChallenger implements CallbackChallenger {
  readonly #options: GrpcChallengerOptions;
  #credential: { credential: ChallengeCredential; madeAt: MadeAt } | undefined;

  constructor(options: GrpcChallengerOptions) {
    this.#options = options;
  }

  /**
   * The client certificate, issued on first use and again when {@link challengeCertificateDue} says
   * (before it expires by either clock, or after a step back of the wall clock).
   */
  clientCredential(): ChallengeCredential {
    const wall = this.#options.now?.() ?? new Date();
    const now = { wallMs: wall.getTime(), monotonicMs: this.#options.monotonic?.() ?? performance.now() };
    let held = this.#credential;
    if (!held || challengeCertificateDue(held.madeAt, held.credential.notAfter, now)) {
      held = {
        credential: challengeClientCertificate(this.#options.ca, this.#options.clusterName, wall),
        madeAt: now,
      };
      this.#credential = held;
    }
    return held.credential;
  }

  async challenge(endpoint: string, claim: ChallengeClaim): Promise<void> {
    const serverName = challengeServerName(this.#options.clusterName);
    let pinned: X509Certificate;
    try {
      pinned = new X509Certificate(decodePem(claim.serverCertificatePem, 'CERTIFICATE')[0] as Buffer);
    } catch (err) {
      // The request's own field: refused, never a fault of this server (parseChallengeField reads it first).
      throw new CallbackRefusedError(
        `the request's challenge certificate is unreadable (${(err as Error).message})`,
      );
    }
    // Out of its dates on this clock, the certificate the request carried could never pass the
    // handshake: the clocks disagree (no verdict on the node; it retries once its clock is set), said
    // before dialing and without the node's address, which the requester need not learn. In its dates,
    // a handshake that fails on dates was shown another certificate: refused (see classify).
    // On the clock OpenSSL judges the handshake by (the system's), not `now`, which dates our own.
    const skew = clockSkewOf(pinned, new Date());
    if (skew) {
      throw new UnavailableError(`the node's challenge certificate ${skew}`, {
        details: { reason: nodeClockReason },
      });
    }
    let presentedOther: string | undefined;
    const identity = (host: string, peer: PeerCertificate): Error | undefined => {
      // The chain already ends at the pinned certificate's key; require the certificate itself too.
      if (!peer.raw?.equals(pinned.raw)) {
        presentedOther = 'the node presented another certificate than its request carried';
        return new Error(presentedOther);
      }
      const mismatch = checkServerIdentity(host, peer);
      if (mismatch) presentedOther = `the node's certificate does not name ${serverName}`;
      return mismatch;
    };
    const proxy = challengeProxy(endpoint, this.#options.env);
    const forwarder = proxy ? await forwardThrough(proxy, endpoint) : undefined;
    const client = this.#client(forwarder?.endpoint ?? endpoint, claim, serverName, identity);
    const nonce = randomBytes(challengeNonceBytes);
    const request: ChallengeRequestMessage = { challenge_id: claim.challengeId, challenge_random: nonce };
    const deadline = Date.now() + (this.#options.timeoutMs ?? 10_000);
    let response: ChallengeResponseMessage;
    try {
      response = await new Promise((resolve, reject) => {
        (client as unknown as ChallengeStub).Challenge(request, { deadline }, (err, answer) =>
          err ? reject(err) : resolve(answer as ChallengeResponseMessage),
        );
      });
    } catch (err) {
      throw classify(err as ServiceError, endpoint, presentedOther, forwarder?.failure());
    } finally {
      client.close();
      forwarder?.close();
    }
    if (
      !answerMatches(response.challenge_response ?? Buffer.alloc(0), challengeAnswer(claim.secret, nonce))
    ) {
      throw new CallbackRefusedError(`the node at ${endpoint} answered the callback challenge wrongly`);
    }
  }

  #client(
    endpoint: string,
    claim: ChallengeClaim,
    serverName: string,
    identity: (host: string, peer: PeerCertificate) => Error | undefined,
  ): Client {
    const own = this.clientCredential();
    const tls = credentials.createSsl(
      Buffer.from(claim.serverCertificatePem),
      Buffer.from(own.keyPem),
      Buffer.from(own.certificatePem),
      { checkServerIdentity: identity },
    );
    const Service = callbackService();
    return new Service(endpoint, tls, {
      'grpc.ssl_target_name_override': serverName,
      'grpc.default_authority': serverName,
      // The proxy is decided above (see the module comment), never by grpc-js.
      'grpc.enable_http_proxy': 0,
      // One call, then closed: no reconnect attempts beyond the deadline.
      'grpc.max_reconnect_backoff_ms': 1000,
    });
  }
}

type ChallengeStub = {
  Challenge(
    request: ChallengeRequestMessage,
    options: { deadline: number },
    callback: (err: ServiceError | null, answer?: ChallengeResponseMessage) => void,
  ): void;
};

/** A listener on 127.0.0.1 whose every connection is a CONNECT tunnel to `endpoint` through `proxy`. */
interface Forwarder {
  /** `127.0.0.1:port`, for grpc-js to dial. */
  endpoint: string;
  /** Why the last tunnel could not be opened, if it could not. */
  failure(): Error | undefined;
  /** Stops listening and closes every connection. */
  close(): void;
}

async function forwardThrough(proxy: URL, endpoint: string): Promise<Forwarder> {
  const target = new URL(`https://${endpoint}`);
  const host = target.hostname.replace(/^\[(.*)\]$/, '$1');
  const port = target.port || '443';
  const open = new Set<Socket>();
  let failure: Error | undefined;
  const server = createServer((client) => {
    open.add(client);
    const ended = new AbortController();
    client.on('error', () => client.destroy());
    client.on('close', () => {
      open.delete(client);
      ended.abort();
    });
    openTunnel(proxy, host, port, ended.signal).then(
      (tunnel) => {
        open.add(tunnel);
        tunnel.on('error', () => tunnel.destroy());
        tunnel.on('close', () => {
          open.delete(tunnel);
          client.destroy();
        });
        client.on('close', () => tunnel.destroy());
        if (client.destroyed) tunnel.destroy();
        client.pipe(tunnel).pipe(client);
      },
      (err: Error) => {
        if (!ended.signal.aborted) failure = err;
        client.destroy();
      },
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  return {
    endpoint: `127.0.0.1:${(server.address() as { port: number }).port}`,
    failure: () => failure,
    close: () => {
      server.close();
      for (const socket of open) socket.destroy();
    },
  };
}

/** A refusal when the node (or whatever answered at its address) said or showed something wrong; else a fault. */
function classify(
  err: ServiceError,
  endpoint: string,
  presentedOther: string | undefined,
  tunnelFailure: Error | undefined,
): Error {
  if (presentedOther) return new CallbackRefusedError(`${presentedOther} (${endpoint})`);
  if (tunnelFailure) {
    return new UnavailableError(
      `the node's challenge server at ${endpoint} could not be reached: ${tunnelFailure.message}`,
      { cause: tunnelFailure },
    );
  }
  if (refusals.has(err.code)) {
    return new CallbackRefusedError(`the node at ${endpoint} refused the callback challenge: ${err.details}`);
  }
  // A certificate refused for its dates although the one the request carried is in its dates (checked
  // before dialing) is another certificate: OpenSSL reports the dates before the pin is compared.
  if (isCertificateRejection(err.details)) {
    return new CallbackRefusedError(
      `the node at ${endpoint} presented a certificate its request did not carry: ${err.details}`,
    );
  }
  return new UnavailableError(`the node's challenge server at ${endpoint} did not answer: ${err.details}`, {
    cause: err,
  });
}

/** The reason of a challenge that failed because the node's clock and this controller's disagree. */
export const nodeClockReason = 'node-clock';

/**
 * Why the certificate the request carried is out of its validity on this controller's clock, if it
 * is: the node made it on its own clock (valid from 15 minutes before for an hour, and replaced when
 * 15 minutes remain), so this is the clocks disagreeing, not a forgery.
 */
function clockSkewOf(certificate: X509Certificate, now: Date): string | undefined {
  if (certificate.validFromDate > now) {
    return "is not valid yet by this controller's clock: the node's clock is ahead of this controller's by more than 15 minutes (check both clocks)";
  }
  if (certificate.validToDate < now) {
    return "has expired by this controller's clock: the node's clock is behind this controller's by more than the certificate had left, 15 to 45 minutes (check both clocks)";
  }
  return undefined;
}

/** Whether a transport failure is the TLS handshake rejecting the node's certificate. */
function isCertificateRejection(details: string): boolean {
  return /self[- ]signed|unable to (verify|get)|certificate|CERT_/i.test(details);
}
