/** Human and machine summaries of certificates and certificate requests (`pki inspect`). */
import { X509Certificate } from 'node:crypto';
import { InvalidInputError } from '../errors.ts';
import type { CertificateAuthority } from './ca.ts';
import { parseCsr } from './csr.ts';
import { acceptedSignatureAlgorithms, describeSpki } from './keys.ts';
import { decodePemBlocks } from './pem.ts';
import { pinOfSpki } from './pin.ts';
import { type ParsedExtensions, parseCertificate } from './x509.ts';

/** What `inspect` reports about one certificate. */
export interface CertificateSummary {
  type: 'certificate';
  subject: string;
  issuer: string;
  serial: string;
  notBefore: string;
  notAfter: string;
  key: string;
  signatureAlgorithm: string;
  ca: boolean;
  keyUsage: string[];
  extKeyUsage: string[];
  dnsNames: string[];
  ipAddresses: string[];
  pin: string;
  /** The machine a node certificate was issued to (the incarnation extension); absent when none. */
  incarnation?: string;
  /** Whether the CA given with --dir signed it; absent without a CA. */
  signedByCa?: boolean;
}

/** What `inspect` reports about a certificate request (which passed every check to get here). */
export interface RequestSummary {
  type: 'certificate-request';
  subject: string;
  key: string;
  signatureAlgorithm: string;
  signature: 'valid';
  keyUsage: string[];
  extKeyUsage: string[];
  dnsNames: string[];
  ipAddresses: string[];
}

export type Summary = CertificateSummary | RequestSummary;

function extensionFields(extensions: ParsedExtensions) {
  return {
    keyUsage: extensions.keyUsage ?? [],
    extKeyUsage: extensions.extKeyUsage ?? [],
    dnsNames: extensions.subjectAltName?.dnsNames ?? [],
    ipAddresses: extensions.subjectAltName?.ipAddresses ?? [],
  };
}

function summariseCertificate(der: Buffer, ca: CertificateAuthority | undefined): CertificateSummary {
  const parsed = parseCertificate(der);
  const signedBy = ca
    ? ca.certificates.some((c) => new X509Certificate(der).verify(c.parsed.publicKey))
    : undefined;
  return {
    type: 'certificate',
    subject: parsed.subject.text,
    issuer: parsed.issuer.text,
    serial: parsed.serialHex,
    notBefore: parsed.notBefore.toISOString(),
    notAfter: parsed.notAfter.toISOString(),
    key: describeSpki(parsed.spki).text,
    signatureAlgorithm:
      acceptedSignatureAlgorithms[parsed.signatureAlgorithm]?.name ?? parsed.signatureAlgorithm,
    ca: parsed.extensions.basicConstraints?.ca ?? false,
    ...extensionFields(parsed.extensions),
    pin: pinOfSpki(parsed.spki),
    ...(parsed.extensions.incarnationId === undefined
      ? {}
      : { incarnation: parsed.extensions.incarnationId }),
    ...(signedBy === undefined ? {} : { signedByCa: signedBy }),
  };
}

/** Summarises every certificate or the request in PEM `text`; `ca` adds whether it signed them. */
export function summarise(text: string, ca?: CertificateAuthority): Summary[] {
  const blocks = decodePemBlocks(text, 'input');
  if (blocks.length === 0)
    throw new InvalidInputError('no PEM block found; expected a CERTIFICATE or CERTIFICATE REQUEST');
  if (blocks.some((b) => b.type.endsWith('CERTIFICATE REQUEST'))) {
    const csr = parseCsr(text);
    return [
      {
        type: 'certificate-request',
        subject: csr.subject.text,
        key: csr.key.text,
        signatureAlgorithm: csr.signatureAlgorithm,
        signature: 'valid',
        ...extensionFields(csr.extensions),
      },
    ];
  }
  return blocks.map((block) => {
    if (block.type !== 'CERTIFICATE') {
      throw new InvalidInputError(
        `cannot inspect a ${block.type}; expected a CERTIFICATE or CERTIFICATE REQUEST`,
      );
    }
    return summariseCertificate(block.der, ca);
  });
}

/** Renders summaries for people, one "field: value" per line, a blank line between items. */
export function renderSummaries(summaries: readonly Summary[]): string {
  const label = (key: string) => key.replace(/([A-Z])/g, ' $1').toLowerCase();
  return summaries
    .map((summary) =>
      Object.entries(summary)
        .filter(([, value]) => !(Array.isArray(value) && value.length === 0))
        .map(([key, value]) => `${label(key)}: ${Array.isArray(value) ? value.join(', ') : String(value)}`)
        .join('\n'),
    )
    .join('\n\n')
    .concat('\n');
}
