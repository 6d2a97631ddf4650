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
 */
import { randomBytes, X509Certificate } from 'node:crypto';
import { checkServerIdentity, type PeerCertificate } from 'node:tls';
import { type Client, credentials, type ServiceError, status } from '@grpc/grpc-js';
import { ForbiddenError, UnavailableError } from '../errors.ts';
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
  challengeClientCertificate,
  challengeRenewBeforeMs,
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
  now?: () => Date;
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
  #credential: ChallengeCredential | undefined;

  constructor(options: GrpcChallengerOptions) {
    this.#options = options;
  }

  /** The client certificate, issued on first use and again before it expires. */
  clientCredential(): ChallengeCredential {
    const now = this.#options.now?.() ?? new Date();
    if (!this.#credential || this.#credential.notAfter.getTime() - now.getTime() < challengeRenewBeforeMs) {
      this.#credential = challengeClientCertificate(this.#options.ca, this.#options.clusterName, now);
    }
    return this.#credential;
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
    const client = this.#client(endpoint, claim, serverName, identity);
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
      throw classify(err as ServiceError, endpoint, presentedOther);
    } finally {
      client.close();
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

/** A refusal when the node (or whatever answered at its address) said or showed something wrong; else a fault. */
function classify(err: ServiceError, endpoint: string, presentedOther: string | undefined): Error {
  if (presentedOther) return new CallbackRefusedError(`${presentedOther} (${endpoint})`);
  if (refusals.has(err.code)) {
    return new CallbackRefusedError(`the node at ${endpoint} refused the callback challenge: ${err.details}`);
  }
  if (isCertificateRejection(err.details)) {
    return new CallbackRefusedError(
      `the node at ${endpoint} presented a certificate its request did not carry: ${err.details}`,
    );
  }
  return new UnavailableError(`the node's challenge server at ${endpoint} did not answer: ${err.details}`, {
    cause: err,
  });
}

/** Whether a transport failure is the TLS handshake rejecting the node's certificate. */
function isCertificateRejection(details: string): boolean {
  return /self[- ]signed|unable to (verify|get)|certificate|CERT_/i.test(details);
}
