/**
 * kops' callback challenge as both sides name it (kops `pkg/bootstrap/challenge*.go`). A node of a
 * callback cloud (Hetzner, DigitalOcean, Scaleway, Azure, Linode) runs a small gRPC-over-TLS server
 * while it asks for certificates, and puts into its request the challenge id, a secret and the
 * server's self-signed certificate. Before issuing, the controller calls that server on an address
 * the cloud reports for the instance, as `kops-controller.<cluster>` with a client certificate from
 * the cluster CA, and sends a fresh nonce; only the process that made the request knows the secret,
 * so only it answers `sha256(secret || nonce)`. Pure: names, message shapes, the answer.
 */
import { createHash, timingSafeEqual, X509Certificate } from 'node:crypto';
import { InvalidInputError } from '../errors.ts';
import { isJsonObject } from '../json-object.ts';
import { decodePem } from '../pki/pem.ts';

/**
 * The clouds whose nodes answer the callback challenge (kops' `UseChallengeCallback`): their proofs
 * name a server but bind nothing to the request, so the controller calls the node back.
 */
export const callbackClouds: ReadonlySet<string> = new Set([
  'hetzner',
  'digitalocean',
  'scaleway',
  'azure',
  'linode',
]);

/** The gRPC service and method path (the .proto's package `kops.bootstrap.v1`). */
export const challengeServiceName = 'kops.bootstrap.v1.CallbackService';
export const challengeMethodPath = `/${challengeServiceName}/Challenge`;

/** kops' well-known port of the node's challenge server (`wellknownports.NodeupChallenge`). */
export const defaultChallengePort = 3987;

/**
 * The endpoint a callback cloud's policy names: the instance's address as the cloud reports it and
 * the challenge port, an IPv6 address in brackets.
 */
export function challengeEndpointOf(address: string, port: number = defaultChallengePort): string {
  // Only an IPv6 address contains a colon; host names and IPv4 addresses never do.
  return address.includes(':') ? `[${address}]:${port}` : `${address}:${port}`;
}

/** Bytes of the controller's nonce (kops: 16). */
export const challengeNonceBytes = 16;

/** Bytes of the node's challenge id (hex-encoded on the wire) and of its secret (kops: 16 each). */
export const challengeIdBytes = 16;
export const challengeSecretBytes = 16;

/** The subject CN of the controller's client certificate, the only caller a node answers. */
export function challengeClientName(clusterName: string): string {
  return `kops-controller.${clusterName}`;
}

/** The name the node's self-signed server certificate carries and the controller checks. */
export function challengeServerName(clusterName: string): string {
  return `challenge-server.${clusterName}`;
}

/** `ChallengeRequest` as proto-loader decodes it (keepCase, bytes as Buffer). */
export interface ChallengeRequestMessage {
  challenge_id: string;
  challenge_random: Buffer;
}

/** `ChallengeResponse` as proto-loader decodes it. */
export interface ChallengeResponseMessage {
  challenge_response: Buffer;
}

/** The answer the node gives and the controller expects: sha256(secret || nonce). */
export function challengeAnswer(secret: Buffer, nonce: Buffer): Buffer {
  return createHash('sha256').update(secret).update(nonce).digest();
}

/** Whether `got` is the expected answer, compared in constant time (a wrong length is simply wrong). */
export function answerMatches(got: Buffer, expected: Buffer): boolean {
  return got.length === expected.length && timingSafeEqual(got, expected);
}

/**
 * The `challenge` field of a bootstrap request (kops `nodeup.ChallengeRequest`), decoded. On the
 * wire `ca` and `challengeSecret` are base64 (Go's encoding of []byte).
 */
export interface ChallengeClaim {
  /** Where the node says it listens; informational only: the controller dials the cloud's address. */
  endpoint: string;
  /** The node server's certificate (PEM): the only certificate the controller accepts from it. */
  serverCertificatePem: string;
  challengeId: string;
  secret: Buffer;
}

/** The JSON of the `challenge` field, as kops' nodeup sends it. */
export function challengeFieldOf(claim: ChallengeClaim): Record<string, string> {
  return {
    endpoint: claim.endpoint,
    ca: Buffer.from(claim.serverCertificatePem).toString('base64'),
    challengeID: claim.challengeId,
    challengeSecret: claim.secret.toString('base64'),
  };
}

function base64Field(value: unknown, name: string): Buffer {
  if (typeof value !== 'string' || value === '' || !/^[A-Za-z0-9+/]+={0,2}$/.test(value)) {
    throw new InvalidInputError(`challenge.${name} must be base64`);
  }
  return Buffer.from(value, 'base64');
}

/** Decodes the `challenge` field; each missing or malformed part is named (kops: "challenge.id not set"). */
export function parseChallengeField(value: unknown): ChallengeClaim {
  if (!isJsonObject(value)) {
    throw new InvalidInputError('challenge must be an object');
  }
  const field = value as Record<string, unknown>;
  const { endpoint, challengeID } = field;
  if (typeof challengeID !== 'string' || !/^[0-9a-f]{1,128}$/.test(challengeID)) {
    throw new InvalidInputError('challenge.challengeID must be a hex string');
  }
  const secret = base64Field(field['challengeSecret'], 'challengeSecret');
  if (secret.length < challengeSecretBytes || secret.length > 64) {
    throw new InvalidInputError(`challenge.challengeSecret must hold ${challengeSecretBytes} to 64 bytes`);
  }
  if (typeof endpoint !== 'string' || endpoint === '' || endpoint.length > 300) {
    throw new InvalidInputError('challenge.endpoint must be "host:port"');
  }
  const pem = base64Field(field['ca'], 'ca').toString('utf8');
  // One certificate, the node server's own: it is a pin, not a CA bundle to chain through.
  const ders = decodePem(pem, 'CERTIFICATE', 'challenge.ca');
  if (ders.length !== 1) throw new InvalidInputError('challenge.ca must hold exactly one certificate');
  // Read here, so that a body that is not a certificate is the request's error, not the caller's fault.
  try {
    new X509Certificate(ders[0] as Buffer);
  } catch (err) {
    throw new InvalidInputError(`challenge.ca is not a readable certificate (${(err as Error).message})`);
  }
  return { endpoint, serverCertificatePem: pem, challengeId: challengeID, secret };
}
