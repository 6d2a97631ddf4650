/**
 * Key pairs: generation, PEM encoding, the key policy every certified key must pass (no RSA below
 * 2048 bits, only well-known curves) and the signature algorithms that go with each key type.
 */
import { createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { InvalidInputError } from '../errors.ts';
import { nullValue, oid, sequence } from './der.ts';

/** Key types the CLI and the CA can generate. */
export const keyAlgorithms = ['ecdsa-p256', 'ecdsa-p384', 'rsa-2048', 'rsa-3072', 'rsa-4096'] as const;
export type KeyAlgorithm = (typeof keyAlgorithms)[number];

/** Generates a new private key; ECDSA P-256 unless told otherwise (small, fast, what kubelet uses). */
export function generateKey(algorithm: KeyAlgorithm = 'ecdsa-p256'): KeyObject {
  switch (algorithm) {
    case 'ecdsa-p256':
      return generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey;
    case 'ecdsa-p384':
      return generateKeyPairSync('ec', { namedCurve: 'P-384' }).privateKey;
    case 'rsa-2048':
    case 'rsa-3072':
    case 'rsa-4096':
      return generateKeyPairSync('rsa', { modulusLength: Number(algorithm.slice(4)), publicExponent: 65537 })
        .privateKey;
    default:
      throw new InvalidInputError(
        `unknown key algorithm "${algorithm}": use one of ${keyAlgorithms.join(', ')}`,
      );
  }
}

/**
 * PEM of a private key in the most widely read form for its type: PKCS#1 for RSA and SEC 1 for
 * ECDSA (what kops, kubeadm and openssl write), PKCS#8 otherwise.
 */
export function privateKeyPem(key: KeyObject): string {
  const type = key.asymmetricKeyType;
  if (type === 'rsa') return key.export({ format: 'pem', type: 'pkcs1' }) as string;
  if (type === 'ec') return key.export({ format: 'pem', type: 'sec1' }) as string;
  return key.export({ format: 'pem', type: 'pkcs8' }) as string;
}

/** Parses a PEM private key (PKCS#1, SEC 1 or PKCS#8); encrypted keys are refused. */
export function parsePrivateKeyPem(text: string, source = 'private key'): KeyObject {
  if (/ENCRYPTED/.test(text)) {
    throw new InvalidInputError(`${source}: encrypted private keys are not supported; decrypt it first`);
  }
  try {
    return createPrivateKey({ key: text, format: 'pem' });
  } catch (err) {
    throw new InvalidInputError(`${source}: not a PEM private key (${(err as Error).message})`, {
      cause: err,
    });
  }
}

/** The DER SubjectPublicKeyInfo of a public or private key. */
export function spkiOf(key: KeyObject): Buffer {
  const publicKey = key.type === 'private' ? createPublicKey(key) : key;
  return publicKey.export({ format: 'der', type: 'spki' });
}

/** Parses a DER SubjectPublicKeyInfo into a key object. */
export function publicKeyFromSpki(spki: Buffer): KeyObject {
  try {
    return createPublicKey({ key: spki, format: 'der', type: 'spki' });
  } catch (err) {
    throw new InvalidInputError(`unreadable public key (${(err as Error).message})`, { cause: err });
  }
}

/** What a key is, in the words people use: "ECDSA P-256", "RSA 2048". */
export interface KeyDescription {
  type: 'rsa' | 'ecdsa' | 'ed25519' | 'other';
  /** Modulus size for RSA, field size for ECDSA. */
  bits: number;
  curve?: string;
  text: string;
}

const curves: Record<string, { name: string; bits: number }> = {
  prime256v1: { name: 'P-256', bits: 256 },
  secp384r1: { name: 'P-384', bits: 384 },
  secp521r1: { name: 'P-521', bits: 521 },
};

/** Describes a key's type and size. */
export function describeKey(key: KeyObject): KeyDescription {
  const details = key.asymmetricKeyDetails ?? {};
  switch (key.asymmetricKeyType) {
    case 'rsa': {
      const bits = details.modulusLength ?? 0;
      return { type: 'rsa', bits, text: `RSA ${bits}` };
    }
    case 'ec': {
      const curve = curves[details.namedCurve ?? ''];
      const name = curve?.name ?? details.namedCurve ?? 'unknown curve';
      return { type: 'ecdsa', bits: curve?.bits ?? 0, curve: name, text: `ECDSA ${name}` };
    }
    case 'ed25519':
      return { type: 'ed25519', bits: 256, text: 'Ed25519' };
    default:
      return { type: 'other', bits: 0, text: key.asymmetricKeyType ?? 'unknown' };
  }
}

/** RSA sizes above this only cost the signer time; refusing them bounds the work per request. */
const maxRsaBits = 8192;

/**
 * Why a key may not be certified, or undefined if it may: RSA 2048–8192 bits with exponent 65537,
 * ECDSA on P-256 / P-384 / P-521, or Ed25519.
 */
export function keyPolicyViolation(key: KeyObject): string | undefined {
  const description = describeKey(key);
  switch (description.type) {
    case 'rsa': {
      if (description.bits < 2048)
        return `RSA key of ${description.bits} bits is too weak; use at least 2048`;
      if (description.bits > maxRsaBits) return `RSA key of ${description.bits} bits exceeds ${maxRsaBits}`;
      const exponent = key.asymmetricKeyDetails?.publicExponent;
      if (exponent !== 65537n) return `RSA public exponent ${exponent} is not accepted; use 65537`;
      return undefined;
    }
    case 'ecdsa':
      return description.bits
        ? undefined
        : `elliptic curve ${description.curve} is not accepted; use P-256, P-384 or P-521`;
    case 'ed25519':
      return undefined;
    default:
      return `${description.text} keys are not accepted; use ECDSA P-256, RSA (2048 bits or more) or Ed25519`;
  }
}

/** How a key signs: the AlgorithmIdentifier written into certificates and the digest node uses. */
export interface SignatureScheme {
  name: string;
  algorithmIdentifier: Buffer;
  /** Digest for `crypto.sign`; null for Ed25519, which hashes internally. */
  hash: string | null;
}

const rsaSha256: SignatureScheme = {
  name: 'sha256WithRSAEncryption',
  algorithmIdentifier: sequence(oid('1.2.840.113549.1.1.11'), nullValue),
  hash: 'sha256',
};
const ecdsaSha256: SignatureScheme = {
  name: 'ecdsa-with-SHA256',
  algorithmIdentifier: sequence(oid('1.2.840.10045.4.3.2')),
  hash: 'sha256',
};
const ecdsaSha384: SignatureScheme = {
  name: 'ecdsa-with-SHA384',
  algorithmIdentifier: sequence(oid('1.2.840.10045.4.3.3')),
  hash: 'sha384',
};
const ecdsaSha512: SignatureScheme = {
  name: 'ecdsa-with-SHA512',
  algorithmIdentifier: sequence(oid('1.2.840.10045.4.3.4')),
  hash: 'sha512',
};

/** The scheme a CA key signs certificates with (the hash sized to the key, as Go does). */
export function signatureSchemeFor(key: KeyObject): SignatureScheme {
  const description = describeKey(key);
  if (description.type === 'rsa') return rsaSha256;
  if (description.curve === 'P-256') return ecdsaSha256;
  if (description.curve === 'P-384') return ecdsaSha384;
  if (description.curve === 'P-521') return ecdsaSha512;
  throw new InvalidInputError(`${description.text} keys cannot sign certificates here; use ECDSA or RSA`);
}

/** Signature algorithms accepted on requests, by OID: the key type they need and the digest. */
export const acceptedSignatureAlgorithms: Record<
  string,
  { name: string; keyType: string; hash: string | null }
> = {
  '1.2.840.113549.1.1.11': { name: 'sha256WithRSAEncryption', keyType: 'rsa', hash: 'sha256' },
  '1.2.840.113549.1.1.12': { name: 'sha384WithRSAEncryption', keyType: 'rsa', hash: 'sha384' },
  '1.2.840.113549.1.1.13': { name: 'sha512WithRSAEncryption', keyType: 'rsa', hash: 'sha512' },
  '1.2.840.10045.4.3.2': { name: 'ecdsa-with-SHA256', keyType: 'ec', hash: 'sha256' },
  '1.2.840.10045.4.3.3': { name: 'ecdsa-with-SHA384', keyType: 'ec', hash: 'sha384' },
  '1.2.840.10045.4.3.4': { name: 'ecdsa-with-SHA512', keyType: 'ec', hash: 'sha512' },
  '1.3.101.112': { name: 'Ed25519', keyType: 'ed25519', hash: null },
};
