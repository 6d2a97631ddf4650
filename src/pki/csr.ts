/**
 * PKCS#10 certificate signing requests (RFC 2986): parsed from untrusted input with a size limit,
 * their signature checked (proof that the requester holds the private key), and their key and
 * requested extensions checked against this CA's policy. Each rejection names its reason.
 */
import { InvalidInputError, KopsError } from '../errors.ts';
import { type CryptoPool, sharedCryptoPool } from './crypto-pool.ts';
import {
  bytesOf,
  childrenOf,
  contentOf,
  type DerNode,
  expectTag,
  fieldsOf,
  nullValue,
  readBitStringBytes,
  readOid,
  readRoot,
  Tag,
} from './der.ts';
import {
  acceptedSignatureAlgorithms,
  describeSpki,
  type KeyDescription,
  keyPolicyViolation,
  verifyWithSpki,
} from './keys.ts';
import { decodePemBlocks, type PemBlock } from './pem.ts';
import { type ParsedExtensions, type ParsedName, parseExtensions, parseName } from './x509.ts';

/** Why a certificate request was refused. */
export type RejectionReason =
  | 'too-large' // the input exceeds the size limit
  | 'malformed' // not a PEM / DER certificate request
  | 'signature' // the signature does not verify, or uses an algorithm not accepted
  | 'key' // the key type or size is not accepted
  | 'subject' // the subject is not what the profile and identity allow
  | 'san' // a subjectAltName is not allowed or not among the verified facts
  | 'reserved-name' // a name or address of the cluster's API server, or a wildcard (reserved-names.ts)
  | 'extension' // a requested extension is not allowed (CA:true, usages, unknown critical)
  | 'lifetime'; // it may be valid for less than the shortest lifetime issued (a short renewal)

/** A certificate request was refused; `reason` says which check failed. */
export class RequestRejectedError extends KopsError {
  readonly reason: RejectionReason;

  constructor(reason: RejectionReason, message: string, options: { cause?: unknown } = {}) {
    super(reason === 'too-large' ? 'too-large' : 'invalid', message, { ...options, details: { reason } });
    this.reason = reason;
  }
}

/** Largest accepted request, PEM or DER; an RSA-8192 request with many names is well below it. */
export const maxCsrBytes = 32 * 1024;

/** A request that passed parsing, signature and key checks. */
export interface ParsedCsr {
  kind: 'csr';
  der: Buffer;
  subject: ParsedName;
  spki: Buffer;
  key: KeyDescription;
  signatureAlgorithm: string;
  /** Extensions from the extensionRequest attribute (empty when none was asked for). */
  extensions: ParsedExtensions;
}

const extensionRequestOid = '1.2.840.113549.1.9.14';

function toDer(input: string | Buffer): Buffer {
  const text = typeof input === 'string' ? input : undefined;
  if (text === undefined && (input as Buffer)[0] === Tag.sequence) return input as Buffer;
  let blocks: PemBlock[];
  try {
    // Text around the one block is ignored, as OpenSSL ignores it: it is never signed or stored.
    blocks = decodePemBlocks(text ?? (input as Buffer).toString('latin1'), 'certificate request');
  } catch (err) {
    throw new RequestRejectedError('malformed', (err as Error).message, { cause: err });
  }
  if (blocks.length === 0)
    throw new RequestRejectedError('malformed', 'no PEM block found; expected a CERTIFICATE REQUEST');
  if (blocks.length > 1)
    throw new RequestRejectedError(
      'malformed',
      `expected one CERTIFICATE REQUEST, found ${blocks.length} PEM blocks`,
    );
  const [block] = blocks as [PemBlock];
  if (block.type !== 'CERTIFICATE REQUEST' && block.type !== 'NEW CERTIFICATE REQUEST') {
    throw new RequestRejectedError(
      'malformed',
      `PEM block is a ${block.type}, expected a CERTIFICATE REQUEST`,
    );
  }
  return block.der;
}

function requestedExtensions(attributes: DerNode | undefined): ParsedExtensions {
  let requested: ParsedExtensions | undefined;
  for (const attribute of attributes ? childrenOf(attributes) : []) {
    const [type, values] = childrenOf(expectTag(attribute, Tag.sequence, 'attribute'));
    if (readOid(expectTag(type, Tag.oid, 'attribute type')) !== extensionRequestOid) continue;
    // One request, one set of extensions: a second one would be read by some and not by others.
    if (requested) throw new RequestRejectedError('malformed', 'more than one extensionRequest attribute');
    const [extensions, extra] = childrenOf(expectTag(values, Tag.set, 'attribute values'));
    if (!extensions || extra)
      throw new RequestRejectedError('malformed', 'extensionRequest must hold exactly one value');
    requested = parseExtensions(extensions);
  }
  return requested ?? { other: [], critical: [] };
}

function parseStructure(der: Buffer) {
  const [info, algorithm, signature, extra] = childrenOf(
    expectTag(readRoot(der), Tag.sequence, 'certification request'),
  );
  if (extra) throw new RequestRejectedError('malformed', 'certification request has extra fields');
  const [version, subject, spki, attributes] = fieldsOf(
    expectTag(info, Tag.sequence, 'certificationRequestInfo'),
    4,
    'certificationRequestInfo',
  );
  const versionBytes = contentOf(expectTag(version, Tag.integer, 'version'));
  if (versionBytes.length !== 1 || versionBytes[0] !== 0) {
    throw new RequestRejectedError(
      'malformed',
      'unsupported certification request version; expected version 1 (0)',
    );
  }
  const [algorithmOid, ...algorithmParameters] = childrenOf(
    expectTag(algorithm, Tag.sequence, 'signature algorithm'),
  );
  return {
    info: bytesOf(info as DerNode),
    subject: parseName(expectTag(subject, Tag.sequence, 'subject')),
    spki: Buffer.from(bytesOf(expectTag(spki, Tag.sequence, 'subjectPublicKeyInfo'))),
    extensions: requestedExtensions(attributes && expectTag(attributes, 0xa0, 'attributes')),
    algorithm: readOid(expectTag(algorithmOid, Tag.oid, 'signature algorithm')),
    algorithmParameters: algorithmParameters.map(bytesOf),
    signature: readBitStringBytes(expectTag(signature, Tag.bitString, 'signature')),
  };
}

/** Extensions a request may carry; anything else marked critical is refused. */
const understoodExtensions = new Set(['2.5.29.14', '2.5.29.15', '2.5.29.17', '2.5.29.19', '2.5.29.37']);

function checkRequestedExtensions(extensions: ParsedExtensions): void {
  if (extensions.basicConstraints?.ca) {
    throw new RequestRejectedError(
      'extension',
      'the request asks for a CA certificate (basicConstraints CA:TRUE); only leaf certificates are issued',
    );
  }
  const caUsages = extensions.keyUsage?.filter((u) => u === 'keyCertSign' || u === 'cRLSign') ?? [];
  if (caUsages.length) {
    throw new RequestRejectedError(
      'extension',
      `the request asks for CA key usages (${caUsages.join(', ')})`,
    );
  }
  const unknownCritical = extensions.critical.filter((id) => !understoodExtensions.has(id));
  if (unknownCritical.length) {
    throw new RequestRejectedError(
      'extension',
      `the request marks unsupported extensions critical: ${unknownCritical.join(', ')}`,
    );
  }
}

/** A request whose structure, key and extensions passed, with its signature still to verify. */
interface InspectedCsr {
  csr: ParsedCsr;
  /** What the proof-of-possession check verifies: `signature` over `info` with the request's key. */
  proof: { hash: string | null; info: Buffer; signature: Buffer };
}

/** Every check of {@link parseCsr} but decoding the key and verifying the signature, done next in or off the event loop. */
function inspectCsr(input: string | Buffer): InspectedCsr {
  const size = typeof input === 'string' ? Buffer.byteLength(input) : input.length;
  if (size > maxCsrBytes) {
    throw new RequestRejectedError(
      'too-large',
      `certificate request of ${size} bytes exceeds the ${maxCsrBytes}-byte limit`,
    );
  }
  const der = toDer(input);
  let structure: ReturnType<typeof parseStructure>;
  try {
    structure = parseStructure(der);
  } catch (err) {
    if (err instanceof RequestRejectedError) throw err;
    throw new RequestRejectedError(
      'malformed',
      `not a valid certificate request: ${(err as Error).message}`,
      { cause: err },
    );
  }
  // The key policy is checked on the DER before any costly key decoding or signature check.
  let key: KeyDescription;
  try {
    key = describeSpki(structure.spki);
  } catch (err) {
    throw new RequestRejectedError(
      'key',
      `the request's public key is malformed: ${(err as Error).message}`,
      {
        cause: err,
      },
    );
  }
  const violation = keyPolicyViolation(key);
  if (violation) throw new RequestRejectedError('key', violation);
  const algorithm = acceptedSignatureAlgorithms[structure.algorithm];
  if (!algorithm) {
    throw new RequestRejectedError(
      'signature',
      `signature algorithm ${structure.algorithm} is not accepted; sign with SHA-256 or stronger`,
    );
  }
  if (algorithm.keyType !== key.type) {
    throw new RequestRejectedError(
      'signature',
      `signature algorithm ${algorithm.name} does not match the ${key.text} key`,
    );
  }
  // The outer AlgorithmIdentifier is not covered by the signature: each algorithm has one spelling
  // of its parameters (NULL for RSA PKCS#1 v1.5 as RFC 4055 writes them, none for ECDSA and Ed25519:
  // RFC 5758, RFC 8410), so that no one can make byte-different copies of a request that still verify.
  const parameters = algorithm.keyType === 'rsa' ? [nullValue] : [];
  if (
    structure.algorithmParameters.length !== parameters.length ||
    structure.algorithmParameters.some((p, i) => !p.equals(parameters[i] as Buffer))
  ) {
    throw new RequestRejectedError(
      'signature',
      `the signature algorithm parameters of ${algorithm.name} must be ${parameters.length ? 'NULL' : 'absent'}`,
    );
  }
  // Extensions are checked before the signature, the costliest check, as the key policy is.
  checkRequestedExtensions(structure.extensions);
  return {
    csr: {
      kind: 'csr',
      der,
      subject: structure.subject,
      spki: structure.spki,
      key,
      signatureAlgorithm: algorithm.name,
      extensions: structure.extensions,
    },
    proof: { hash: algorithm.hash, info: structure.info, signature: structure.signature },
  };
}

function unreadableKey(err: unknown): RequestRejectedError {
  return new RequestRejectedError(
    'key',
    `the request's public key is unreadable: ${(err as Error).message}`,
    {
      cause: err,
    },
  );
}

function badSignature(): RequestRejectedError {
  return new RequestRejectedError(
    'signature',
    'the request signature does not verify: it was altered or not made with the private key of its public key',
  );
}

/**
 * Parses and checks a PKCS#10 request given as PEM (text or bytes) or DER: size, structure,
 * key policy, requested extensions and signature (proof of possession). Profile-specific checks
 * (subject, names, usages) happen when a profile issues the certificate.
 */
export function parseCsr(input: string | Buffer): ParsedCsr {
  const { csr, proof } = inspectCsr(input);
  let valid: boolean;
  try {
    valid = verifyWithSpki(proof.hash, proof.info, csr.spki, proof.signature);
  } catch (err) {
    throw unreadableKey(err);
  }
  if (!valid) throw badSignature();
  return csr;
}

/**
 * {@link parseCsr} with the key decoded and the signature verified on the crypto pool's threads
 * (crypto-pool.ts): the same checks and rejections, but the event loop only parses the structure,
 * so a server keeps answering while other cores verify.
 */
export async function parseCsrAsync(
  input: string | Buffer,
  pool: CryptoPool = sharedCryptoPool(),
): Promise<ParsedCsr> {
  const { csr, proof } = inspectCsr(input);
  let valid: boolean;
  try {
    valid = await pool.verify(proof.hash, proof.info, csr.spki, proof.signature);
  } catch (err) {
    if (err instanceof InvalidInputError) throw unreadableKey(err);
    throw err;
  }
  if (!valid) throw badSignature();
  return csr;
}
