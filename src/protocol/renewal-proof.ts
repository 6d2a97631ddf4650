/**
 * The renewal proof (`Authorization: x-kops-renewal <token>`), both sides' view: a node renews its
 * certificates before they expire by signing, with the key of its current kubelet client
 * certificate, the SHA-256 of the exact request body, a timestamp and the audience
 * `kops-controller.<cluster>`, and sending that certificate along. The server checks the certificate
 * against the cluster CA (unexpired, a client certificate of `system:node:<name>`), the signature
 * with its key, the body hash, the timestamp's freshness and the audience, and spends the signature
 * once. The token is base64url of a small JSON document. Pure: the format and the signed text.
 */
import { createHash } from 'node:crypto';
import { InvalidInputError } from '../errors.ts';
import { isJsonObject } from '../json-object.ts';

/** The Authorization scheme of a renewal. */
export const renewalScheme = 'x-kops-renewal';

/** The version of the signed text and token. */
const version = 1;

/** The audience a renewal names: the controller of one cluster, whichever URL reached it. */
export function renewalAudience(clusterName: string): string {
  return `kops-controller.${clusterName}`;
}

/** What a renewal token carries. */
export interface RenewalProof {
  /** DER of the current kubelet client certificate. */
  certificate: Buffer;
  /** When the node signed, ISO 8601. */
  timestamp: string;
  audience: string;
  /** Hex SHA-256 of the request body. */
  bodySha256: string;
  /** Signature over {@link renewalSignedText} with the certificate's key (ECDSA DER or RSA PKCS#1 v1.5, SHA-256). */
  signature: Buffer;
}

/** The exact bytes the node signs. */
export function renewalSignedText(
  proof: Pick<RenewalProof, 'audience' | 'timestamp' | 'bodySha256'>,
): Buffer {
  return Buffer.from(
    `kops-controller node renewal v${version}\n${proof.audience}\n${proof.timestamp}\n${proof.bodySha256}`,
  );
}

/** Hex SHA-256 of a request body. */
export function bodyDigest(body: Uint8Array): string {
  return createHash('sha256').update(body).digest('hex');
}

/** The token (after the scheme) for a proof. */
export function encodeRenewalToken(proof: RenewalProof): string {
  const document = {
    v: version,
    cert: proof.certificate.toString('base64'),
    ts: proof.timestamp,
    aud: proof.audience,
    body: proof.bodySha256,
    sig: proof.signature.toString('base64'),
  };
  return Buffer.from(JSON.stringify(document)).toString('base64url');
}

function stringField(document: Record<string, unknown>, name: string): string {
  const value = document[name];
  if (typeof value !== 'string' || value === '')
    throw new InvalidInputError(`renewal proof: ${name} is missing`);
  return value;
}

/** Decodes a token; anything malformed is an InvalidInputError naming the part. */
export function decodeRenewalToken(token: string): RenewalProof {
  if (!/^[A-Za-z0-9_-]+$/.test(token)) throw new InvalidInputError('renewal proof: not base64url');
  let document: unknown;
  try {
    document = JSON.parse(Buffer.from(token, 'base64url').toString('utf8'));
  } catch {
    throw new InvalidInputError('renewal proof: not a JSON document');
  }
  if (!isJsonObject(document)) {
    throw new InvalidInputError('renewal proof: not a JSON object');
  }
  const fields = document as Record<string, unknown>;
  if (fields['v'] !== version) throw new InvalidInputError(`renewal proof: version must be ${version}`);
  const bodySha256 = stringField(fields, 'body');
  if (!/^[0-9a-f]{64}$/.test(bodySha256)) throw new InvalidInputError('renewal proof: body is not a SHA-256');
  return {
    certificate: Buffer.from(stringField(fields, 'cert'), 'base64'),
    timestamp: stringField(fields, 'ts'),
    audience: stringField(fields, 'aud'),
    bodySha256,
    signature: Buffer.from(stringField(fields, 'sig'), 'base64'),
  };
}
