/**
 * Throwaway TLS material for the simulators: an ECDSA P-256 CA, serving certificates for loopback
 * and client certificates whose subject carries a Kubernetes identity (CN = user, O = groups).
 * Nothing here is meant for production; the real PKI lives in src/pki.
 */
import 'reflect-metadata';
import { webcrypto } from 'node:crypto';
import {
  BasicConstraintsExtension,
  ExtendedKeyUsage,
  ExtendedKeyUsageExtension,
  type JsonName,
  KeyUsageFlags,
  KeyUsagesExtension,
  PemConverter,
  Pkcs10CertificateRequestGenerator,
  SubjectAlternativeNameExtension,
  X509Certificate,
  X509CertificateGenerator,
} from '@peculiar/x509';

const keyAlgorithm = { name: 'ECDSA', namedCurve: 'P-256' } as const;
const signingAlgorithm = { name: 'ECDSA', hash: 'SHA-256' } as const;
const dayMs = 24 * 60 * 60 * 1000;

/** A certificate authority: its certificate and the key that signs with it. */
export interface SimCertificateAuthority {
  certificate: string;
  privateKey: string;
  /** The signing key as WebCrypto needs it. */
  signingKey: webcrypto.CryptoKey;
}

/** A leaf certificate and its private key, both PEM. */
export interface SimKeyPair {
  certificate: string;
  privateKey: string;
}

/** A Kubernetes identity carried in a client certificate. */
export interface CertificateIdentity {
  name: string;
  groups: string[];
}

async function newKeys(): Promise<webcrypto.CryptoKeyPair> {
  return webcrypto.subtle.generateKey(keyAlgorithm, true, [
    'sign',
    'verify',
  ]) as Promise<webcrypto.CryptoKeyPair>;
}

async function privateKeyPem(key: webcrypto.CryptoKey): Promise<string> {
  const der = await webcrypto.subtle.exportKey('pkcs8', key);
  return PemConverter.encode(der, 'PRIVATE KEY');
}

function validity(days: number): { notBefore: Date; notAfter: Date } {
  // Backdated a little so that a clock a few seconds behind still accepts a fresh certificate.
  const now = Date.now();
  return { notBefore: new Date(now - 60_000), notAfter: new Date(now + days * dayMs) };
}

/** Creates a self-signed CA valid for a year. */
export async function createCertificateAuthority(
  commonName = 'kops-controller-sim-ca',
): Promise<SimCertificateAuthority> {
  const keys = await newKeys();
  const cert = await X509CertificateGenerator.createSelfSigned({
    name: [{ CN: [commonName] }],
    keys,
    signingAlgorithm,
    ...validity(365),
    extensions: [
      new BasicConstraintsExtension(true, 0, true),
      new KeyUsagesExtension(
        KeyUsageFlags.keyCertSign | KeyUsageFlags.cRLSign | KeyUsageFlags.digitalSignature,
        true,
      ),
    ],
  });
  return {
    certificate: cert.toString('pem'),
    privateKey: await privateKeyPem(keys.privateKey),
    signingKey: keys.privateKey,
  };
}

async function issue(
  ca: SimCertificateAuthority,
  subject: JsonName,
  usage: ExtendedKeyUsage,
  extraExtensions: SubjectAlternativeNameExtension[],
): Promise<SimKeyPair> {
  const keys = await newKeys();
  const cert = await X509CertificateGenerator.create({
    subject,
    issuer: new X509Certificate(ca.certificate).subject,
    publicKey: keys.publicKey,
    signingKey: ca.signingKey,
    signingAlgorithm,
    ...validity(365),
    extensions: [
      new BasicConstraintsExtension(false, undefined, true),
      new KeyUsagesExtension(KeyUsageFlags.digitalSignature | KeyUsageFlags.keyEncipherment, true),
      new ExtendedKeyUsageExtension([usage]),
      ...extraExtensions,
    ],
  });
  return { certificate: cert.toString('pem'), privateKey: await privateKeyPem(keys.privateKey) };
}

/** Issues a serving certificate for loopback: SANs 127.0.0.1, ::1 and localhost, plus `extraNames`. */
export async function issueServingCertificate(
  ca: SimCertificateAuthority,
  extraNames: string[] = [],
): Promise<SimKeyPair> {
  const names = [
    { type: 'dns' as const, value: 'localhost' },
    { type: 'ip' as const, value: '127.0.0.1' },
    { type: 'ip' as const, value: '::1' },
    ...extraNames.map((value) => ({
      type: /^[\d.]+$|:/.test(value) ? ('ip' as const) : ('dns' as const),
      value,
    })),
  ];
  return issue(ca, [{ CN: ['localhost'] }], ExtendedKeyUsage.serverAuth, [
    new SubjectAlternativeNameExtension(names),
  ]);
}

/** Issues a client certificate for a Kubernetes identity: CN = user name, one O per group. */
export async function issueClientCertificate(
  ca: SimCertificateAuthority,
  identity: CertificateIdentity,
): Promise<SimKeyPair> {
  const subject: JsonName = [{ CN: [identity.name] }, ...identity.groups.map((g) => ({ O: [g] }))];
  return issue(ca, subject, ExtendedKeyUsage.clientAuth, []);
}

/** A PKCS#10 certificate request (PEM) for an identity, and its private key, as a kubelet would make. */
export async function createCertificateRequest(
  identity: CertificateIdentity,
): Promise<{ csr: string; privateKey: string }> {
  const keys = await newKeys();
  const request = await Pkcs10CertificateRequestGenerator.create({
    name: [{ CN: [identity.name] }, ...identity.groups.map((g) => ({ O: [g] }))],
    keys,
    signingAlgorithm,
  });
  return { csr: request.toString('pem'), privateKey: await privateKeyPem(keys.privateKey) };
}
