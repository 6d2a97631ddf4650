/**
 * The cluster certificate authority: a trust bundle of one or more CA certificates (several while a
 * CA is being rotated) and exactly one active signer, the certificate whose private key is held.
 * Certificates and keys are identified by keypair ids the way kops does: the decimal serial number,
 * which kops builds from the creation time so that a newer CA compares higher.
 */
import { type KeyObject, randomBytes } from 'node:crypto';
import { InvalidInputError } from '../errors.ts';
import { unsignedInteger } from './der.ts';
import {
  describeKey,
  describeSpki,
  generateKey,
  type KeyAlgorithm,
  keyPolicyViolation,
  type SignatureScheme,
  signatureSchemeFor,
  spkiOf,
} from './keys.ts';
import { decodePem, encodePem } from './pem.ts';
import {
  authorityKeyIdentifierExtension,
  basicConstraintsExtension,
  encodeName,
  keyUsageExtension,
  type ParsedCertificate,
  parseCertificate,
  signCertificate,
  subjectKeyIdentifierExtension,
} from './x509.ts';

/** One CA certificate of the trust bundle. */
export interface CaCertificate {
  keypairId: string;
  pem: string;
  parsed: ParsedCertificate;
  /** The key identifier leaf certificates name in their authorityKeyIdentifier. */
  keyIdentifier: Buffer;
}

/** The active signer, with everything per-issuance work needs already encoded. */
export interface CaSigner {
  certificate: CaCertificate;
  key: KeyObject;
  scheme: SignatureScheme;
  /** Encoded authorityKeyIdentifier extension for the certificates it signs. */
  authorityKeyIdentifier: Buffer;
}

/** A CA ready to sign: its name (the kops keyset name), the trust bundle and the signer. */
export interface CertificateAuthority {
  name: string;
  /** Every trusted CA certificate, the active signer's first. */
  certificates: readonly CaCertificate[];
  signer: CaSigner;
}

/** The kops keyset name of the cluster CA. */
export const defaultCaName = 'kubernetes-ca';
const yearMs = 365 * 24 * 3600_000;

/** A serial that is also a kops keypair id: creation time in nanoseconds, shifted, plus 32 random bits. */
export function kopsStyleSerial(now: Date): bigint {
  return ((BigInt(now.getTime()) * 1_000_000n) << 32n) | BigInt(randomBytes(4).readUInt32BE());
}

function bigintBytes(value: bigint): Buffer {
  const hex = value.toString(16);
  return Buffer.from(hex.length % 2 ? `0${hex}` : hex, 'hex');
}

/** Wraps a parsed CA certificate, checking that it may act as a CA. */
export function caCertificateOf(pem: string, keypairId?: string): CaCertificate {
  const [der] = decodePem(pem, 'CERTIFICATE', 'CA certificate');
  const parsed = parseCertificate(der as Buffer);
  if (!parsed.extensions.basicConstraints?.ca) {
    throw new InvalidInputError(
      `certificate "${parsed.subject.text}" is not a CA (basicConstraints CA:FALSE)`,
    );
  }
  if (parsed.extensions.keyUsage && !parsed.extensions.keyUsage.includes('keyCertSign')) {
    throw new InvalidInputError(`CA certificate "${parsed.subject.text}" lacks the keyCertSign key usage`);
  }
  return {
    keypairId: keypairId ?? parsed.serialDecimal,
    pem: encodePem('CERTIFICATE', parsed.der),
    parsed,
    keyIdentifier: parsed.extensions.subjectKeyIdentifier ?? describeSpki(parsed.spki).keyIdentifier,
  };
}

/** Builds the signer for a CA certificate and its key; the key must be the certificate's. */
export function signerOf(certificate: CaCertificate, key: KeyObject, now = new Date()): CaSigner {
  if (!spkiOf(key).equals(certificate.parsed.spki)) {
    throw new InvalidInputError(
      `the CA private key does not belong to CA certificate "${certificate.parsed.subject.text}" (keypair ${certificate.keypairId})`,
    );
  }
  if (certificate.parsed.notAfter <= now) {
    throw new InvalidInputError(
      `CA certificate "${certificate.parsed.subject.text}" expired on ${certificate.parsed.notAfter.toISOString()}; rotate the CA`,
    );
  }
  const violation = keyPolicyViolation(describeKey(key));
  if (violation) throw new InvalidInputError(`CA key: ${violation}`);
  return {
    certificate,
    key,
    scheme: signatureSchemeFor(key),
    authorityKeyIdentifier: authorityKeyIdentifierExtension(certificate.keyIdentifier),
  };
}

/** Options for a new CA. */
export interface CreateCaOptions {
  /** Keyset name; also the default common name. */
  name?: string;
  commonName?: string;
  algorithm?: KeyAlgorithm;
  /** Validity; ten years by default, as kops. */
  lifetimeMs?: number;
  now?: Date;
}

/** Creates a self-signed CA certificate and key (ECDSA P-256 unless told otherwise). */
export function createCaKeypair(options: CreateCaOptions = {}): {
  certificate: CaCertificate;
  key: KeyObject;
} {
  const now = options.now ?? new Date();
  const name = options.name ?? defaultCaName;
  const key = generateKey(options.algorithm ?? 'ecdsa-p256');
  const spki = spkiOf(key);
  const keyIdentifier = describeSpki(spki).keyIdentifier;
  const subject = encodeName({ commonName: options.commonName ?? name, organizations: [] });
  const serial = kopsStyleSerial(now);
  const der = signCertificate(
    {
      serial: unsignedInteger(bigintBytes(serial)),
      issuer: subject,
      subject,
      // Backdated like the leaves, so that a node whose clock is a little behind accepts it.
      notBefore: new Date(now.getTime() - 5 * 60_000),
      notAfter: new Date(now.getTime() + (options.lifetimeMs ?? 10 * yearMs)),
      spki,
      extensions: [
        keyUsageExtension(['digitalSignature', 'keyCertSign', 'cRLSign']),
        // Path length 0: this CA signs leaves only, so a leaked leaf key can never mint certificates.
        basicConstraintsExtension(true, 0),
        subjectKeyIdentifierExtension(keyIdentifier),
        authorityKeyIdentifierExtension(keyIdentifier),
      ],
    },
    signatureSchemeFor(key),
    key,
  );
  return { certificate: caCertificateOf(encodePem('CERTIFICATE', der), serial.toString(10)), key };
}

/** Creates a new CA whose bundle holds only its own certificate. */
export function createCa(options: CreateCaOptions = {}): CertificateAuthority {
  const { certificate, key } = createCaKeypair(options);
  return {
    name: options.name ?? defaultCaName,
    certificates: [certificate],
    signer: signerOf(certificate, key, options.now),
  };
}

/**
 * Loads a CA from PEM: `bundlePem` holds one or more CA certificates, `key` is the active signer's,
 * which picks the signer among them. Keypair ids are the serials unless `signerKeypairId` (from
 * kops-controller's keypair-ids.yaml) names the signer's.
 */
export function caFromPem(
  bundlePem: string,
  key: KeyObject,
  options: { name?: string; signerKeypairId?: string; now?: Date } = {},
): CertificateAuthority {
  const certificates = decodePem(bundlePem, 'CERTIFICATE', 'CA bundle').map((der) =>
    caCertificateOf(encodePem('CERTIFICATE', der)),
  );
  const spki = spkiOf(key);
  const signerIndex = certificates.findIndex((c) => c.parsed.spki.equals(spki));
  if (signerIndex < 0) {
    throw new InvalidInputError('the CA private key matches none of the certificates in the CA bundle');
  }
  const found = certificates[signerIndex] as CaCertificate;
  const signerCertificate = { ...found, keypairId: options.signerKeypairId ?? found.keypairId };
  return {
    name: options.name ?? defaultCaName,
    certificates: [signerCertificate, ...certificates.filter((_, i) => i !== signerIndex)],
    signer: signerOf(signerCertificate, key, options.now),
  };
}

/** The trust bundle as PEM, active signer first: what nodes and the API server trust. */
export function bundlePem(ca: CertificateAuthority): string {
  return ca.certificates.map((c) => c.pem).join('');
}

/**
 * Rotates the CA: a new key and certificate become the signer, and the previous certificates stay
 * in the bundle so that everything they signed is trusted until it expires or is dropped.
 */
export function rotateCa(
  ca: CertificateAuthority,
  options: Omit<CreateCaOptions, 'name'> = {},
): CertificateAuthority {
  const { certificate, key } = createCaKeypair({
    ...options,
    name: ca.name,
    commonName: options.commonName ?? ca.signer.certificate.parsed.subject.commonName ?? ca.name,
  });
  return {
    name: ca.name,
    certificates: [certificate, ...ca.certificates],
    signer: signerOf(certificate, key, options.now),
  };
}
