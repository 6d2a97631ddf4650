/**
 * Key pairs: generation, PEM encoding, the key policy every certified key must pass (no RSA below
 * 2048 bits, only well-known curves) and the signature algorithms that go with each key type.
 */
import {
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  hash,
  type KeyObject,
  verify,
} from 'node:crypto';
import { InvalidInputError } from '../errors.ts';
import {
  contentOf,
  type DerNode,
  expectNull,
  expectTag,
  fieldsOf,
  nullValue,
  oid,
  readBitStringBytes,
  readOid,
  readRoot,
  sequence,
  Tag,
} from './der.ts';

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

/**
 * Parses a DER SubjectPublicKeyInfo into a key object. It goes in as PEM on purpose: Node 24's
 * OpenSSL decodes a PEM "PUBLIC KEY" in about 40 µs and the same bytes as DER in about 95 µs
 * (measured with fresh P-256 keys, base64 included), and every CSR a server checks carries a new key.
 */
export function publicKeyFromSpki(spki: Buffer): KeyObject {
  try {
    return createPublicKey(
      `-----BEGIN PUBLIC KEY-----\n${spki.toString('base64')}\n-----END PUBLIC KEY-----\n`,
    );
  } catch (err) {
    throw new InvalidInputError(`unreadable public key (${(err as Error).message})`, { cause: err });
  }
}

/**
 * Whether `signature` over `data` verifies with the DER SubjectPublicKeyInfo `spki`. Throws
 * InvalidInputError when the key cannot be read; a malformed signature is simply false (OpenSSL
 * refuses some outright instead of answering false).
 */
export function verifyWithSpki(
  hash: string | null,
  data: Uint8Array,
  spki: Buffer,
  signature: Uint8Array,
): boolean {
  const key = publicKeyFromSpki(spki);
  try {
    return verify(hash, data, key, signature);
  } catch {
    return false;
  }
}

/** What a key is, in the words people use: "ECDSA P-256", "RSA 2048". */
export interface KeyDescription {
  type: 'rsa' | 'ecdsa' | 'ed25519' | 'other';
  /** Modulus size for RSA, field size for ECDSA; 0 when unknown. */
  bits: number;
  curve?: string;
  /** RSA public exponent. */
  exponent?: bigint;
  text: string;
  /** SHA-1 of the public key bits: the subjectKeyIdentifier of RFC 5280 §4.2.1.2, method 1. */
  keyIdentifier: Buffer;
}

const curves: Record<string, { name: string; bits: number }> = {
  '1.2.840.10045.3.1.7': { name: 'P-256', bits: 256 },
  '1.3.132.0.34': { name: 'P-384', bits: 384 },
  '1.3.132.0.35': { name: 'P-521', bits: 521 },
};
const otherCurves: Record<string, string> = { '1.3.132.0.10': 'secp256k1' };

function unsignedBytes(node: DerNode): Buffer {
  const bytes = contentOf(expectTag(node, Tag.integer, 'integer'));
  let start = 0;
  while (start < bytes.length - 1 && bytes[start] === 0) start++;
  return bytes.subarray(start);
}

function bitLength(bytes: Buffer): number {
  const first = bytes[0] ?? 0;
  return first === 0 ? 0 : (bytes.length - 1) * 8 + (32 - Math.clz32(first));
}

/**
 * Describes a DER SubjectPublicKeyInfo by reading it directly: much cheaper than building a key
 * object (OpenSSL 3 key decoding costs several signatures' worth of time), so issuance for a key
 * object stays close to the cost of its signature. Structure is checked, strictly: no extra
 * fields, RSA's parameters exactly NULL and Ed25519's absent (Go's x509 refuses a certificate
 * otherwise, kubelet included), since a CSR's key is copied into the certificate as it came. The EC
 * point is not checked: OpenSSL checks it when it decodes the key (a CSR's signature check; a bare
 * key is decoded when its request is made, `publicKeyRequest`).
 */
export function describeSpki(spki: Buffer): KeyDescription {
  const [algorithm, keyBits] = fieldsOf(
    expectTag(readRoot(spki), Tag.sequence, 'subjectPublicKeyInfo'),
    2,
    'subjectPublicKeyInfo',
  );
  const [algorithmOid, parameters] = fieldsOf(
    expectTag(algorithm, Tag.sequence, 'key algorithm'),
    2,
    'key algorithm',
  );
  const type = readOid(expectTag(algorithmOid, Tag.oid, 'key algorithm'));
  const key = readBitStringBytes(expectTag(keyBits, Tag.bitString, 'public key'));
  const keyIdentifier = hash('sha1', key, 'buffer');
  if (type === '1.2.840.113549.1.1.1') {
    expectNull(parameters, 'RSA key parameters');
    const [modulus, exponent] = fieldsOf(
      expectTag(readRoot(key), Tag.sequence, 'RSA public key'),
      2,
      'RSA public key',
    );
    const bits = bitLength(unsignedBytes(expectTag(modulus, Tag.integer, 'RSA modulus')));
    const exponentBytes = unsignedBytes(expectTag(exponent, Tag.integer, 'RSA exponent'));
    return {
      type: 'rsa',
      bits,
      exponent: BigInt(`0x${exponentBytes.toString('hex') || '0'}`),
      text: `RSA ${bits}`,
      keyIdentifier,
    };
  }
  if (type === '1.2.840.10045.2.1') {
    const curveOid = readOid(expectTag(parameters, Tag.oid, 'named curve'));
    const curve = curves[curveOid];
    if (!curve) {
      const name = otherCurves[curveOid] ?? curveOid;
      return { type: 'ecdsa', bits: 0, curve: name, text: `ECDSA ${name}`, keyIdentifier };
    }
    const size = Math.ceil(curve.bits / 8);
    const uncompressed = key[0] === 4 && key.length === 1 + 2 * size;
    const compressed = (key[0] === 2 || key[0] === 3) && key.length === 1 + size;
    if (!uncompressed && !compressed) throw new InvalidInputError(`malformed ${curve.name} public key point`);
    return { type: 'ecdsa', bits: curve.bits, curve: curve.name, text: `ECDSA ${curve.name}`, keyIdentifier };
  }
  if (type === '1.3.101.112') {
    if (parameters) throw new InvalidInputError('malformed DER: Ed25519 key parameters must be absent');
    if (key.length !== 32) throw new InvalidInputError('malformed Ed25519 public key');
    return { type: 'ed25519', bits: 256, text: 'Ed25519', keyIdentifier };
  }
  return { type: 'other', bits: 0, text: `key type ${type}`, keyIdentifier };
}

/** Describes a key object (reads its SubjectPublicKeyInfo). */
export function describeKey(key: KeyObject): KeyDescription {
  return describeSpki(spkiOf(key));
}

/** RSA sizes above this only cost the signer time; refusing them bounds the work per request. */
const maxRsaBits = 8192;

/**
 * Why a key may not be certified, or undefined if it may: RSA 2048–8192 bits with exponent 65537,
 * ECDSA on P-256 / P-384 / P-521, or Ed25519.
 */
export function keyPolicyViolation(description: KeyDescription): string | undefined {
  switch (description.type) {
    case 'rsa':
      if (description.bits < 2048)
        return `RSA key of ${description.bits} bits is too weak; use at least 2048`;
      if (description.bits > maxRsaBits) return `RSA key of ${description.bits} bits exceeds ${maxRsaBits}`;
      if (description.exponent !== 65537n) {
        return `RSA public exponent ${description.exponent} is not accepted; use 65537`;
      }
      return undefined;
    case 'ecdsa':
      return description.bits
        ? undefined
        : `elliptic curve ${description.curve} is not accepted; use P-256, P-384 or P-521`;
    case 'ed25519':
      return undefined;
    default:
      return `${description.text} is not accepted; use ECDSA P-256, RSA (2048 bits or more) or Ed25519`;
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
  '1.2.840.10045.4.3.2': { name: 'ecdsa-with-SHA256', keyType: 'ecdsa', hash: 'sha256' },
  '1.2.840.10045.4.3.3': { name: 'ecdsa-with-SHA384', keyType: 'ecdsa', hash: 'sha384' },
  '1.2.840.10045.4.3.4': { name: 'ecdsa-with-SHA512', keyType: 'ecdsa', hash: 'sha512' },
  '1.3.101.112': { name: 'Ed25519', keyType: 'ed25519', hash: null },
};
