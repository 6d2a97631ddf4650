/**
 * kops metal's `x-pki-tpm` proof as it travels (pkg/bootstrap/pkibootstrap): the node signs a small
 * JSON record — its host name, its public key, the SHA-256 of the request body, the time and the kops
 * audience — with the ECDSA key registered for it in the `Host` resource, and sends
 * `x-pki-tpm base64(JSON {signature, data})`, where both members are base64 as Go marshals `[]byte`.
 * The node side (src/agent/pki-tpm-proof.ts) encodes, the `pki-tpm` policy decodes. Pure.
 */
import { createHash } from 'node:crypto';
import { InvalidInputError } from '../../errors.ts';
import { isJsonObject } from '../../json-object.ts';

/** The Authorization scheme. */
export const pkiTpmScheme = 'x-pki-tpm';
/** The audience kops nodes sign (the same one as the GCE TPM proof). */
export const pkiTpmAudience = 'kops.k8s.io/node-bootstrap';
/** kops' default `server.pki.MaxTimeSkew`, in seconds. */
export const defaultPkiTpmMaxTimeSkewSeconds = 300;

/** The signed record, member for member as nodeup marshals it (Go field order, `omitempty`). */
export interface PkiTpmTokenData {
  /** The host name: the `Host` object to look up. */
  instance: string;
  /** The PEM `PUBLIC KEY` the node signs with (informative: the registered key decides). */
  keyID?: string;
  /** SHA-256 of the request body. */
  requestHash: Buffer;
  /** Unix seconds. */
  timestamp: number;
  audience: string;
}

/** A decoded proof: the exact signed bytes, the signature and the record they hold. */
export interface DecodedPkiTpmToken {
  dataBytes: Buffer;
  signature: Buffer;
  data: PkiTpmTokenData;
}

/** The SHA-256 of a request body, the `requestHash` a proof carries. */
export function pkiTpmRequestHash(body: Uint8Array): Buffer {
  return createHash('sha256').update(body).digest();
}

/** The JSON bytes nodeup signs for `data` (member order as Go's encoder writes them). */
export function encodePkiTpmData(data: PkiTpmTokenData): Buffer {
  return Buffer.from(
    JSON.stringify({
      instance: data.instance || undefined,
      keyID: data.keyID || undefined,
      requestHash: data.requestHash.length ? data.requestHash.toString('base64') : undefined,
      timestamp: data.timestamp || undefined,
      audience: data.audience || undefined,
    }),
  );
}

/** The credential after the scheme: base64 of `{"signature": …, "data": …}`. */
export function encodePkiTpmToken(dataBytes: Buffer, signature: Buffer): string {
  return Buffer.from(
    JSON.stringify({ signature: signature.toString('base64'), data: dataBytes.toString('base64') }),
  ).toString('base64');
}

/** Largest credential accepted: a P-521 key and signature fit in well under 2 KiB. */
const maxTokenChars = 8192;

function base64Bytes(value: unknown, what: string): Buffer {
  if (typeof value !== 'string' || !/^[A-Za-z0-9+/]*={0,2}$/.test(value) || value.length % 4 !== 0) {
    throw new InvalidInputError(`${what} is not base64`);
  }
  return Buffer.from(value, 'base64');
}

function jsonObject(bytes: Buffer, what: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(bytes.toString('utf8'));
  } catch {
    throw new InvalidInputError(`${what} is not JSON`);
  }
  if (!isJsonObject(value)) {
    throw new InvalidInputError(`${what} is not a JSON object`);
  }
  return value as Record<string, unknown>;
}

/** Decodes the credential; anything malformed is an InvalidInputError naming the part. */
export function decodePkiTpmToken(token: string): DecodedPkiTpmToken {
  if (token.length > maxTokenChars)
    throw new InvalidInputError(`the proof exceeds ${maxTokenChars} characters`);
  const outer = jsonObject(base64Bytes(token, 'the proof'), 'the proof');
  const dataBytes = base64Bytes(outer['data'], 'the signed data');
  const signature = base64Bytes(outer['signature'], 'the signature');
  if (signature.length === 0) throw new InvalidInputError('the proof carries no signature');
  const raw = jsonObject(dataBytes, 'the signed data');
  const { instance, keyID, timestamp, audience } = raw;
  if (typeof instance !== 'string' || instance === '') {
    throw new InvalidInputError('the signed data names no instance');
  }
  if (typeof timestamp !== 'number' || !Number.isSafeInteger(timestamp)) {
    throw new InvalidInputError('the signed data has no timestamp');
  }
  return {
    dataBytes,
    signature,
    data: {
      instance,
      ...(typeof keyID === 'string' ? { keyID } : {}),
      requestHash:
        raw['requestHash'] === undefined ? Buffer.alloc(0) : base64Bytes(raw['requestHash'], 'requestHash'),
      timestamp,
      audience: typeof audience === 'string' ? audience : '',
    },
  };
}
