/**
 * The simulated signer of Azure IMDS attested documents: a root, an issuing CA and a leaf named
 * `<location>.metadata.azure.com`, RSA 2048 like Azure's, and the PKCS#7 SignedData IMDS returns
 * (the JSON content attached, signed with SHA-256). Tests make rogue signers with the same
 * functions: a leaf with another name, or a whole chain the controller does not trust.
 */
import 'reflect-metadata';
import { webcrypto } from 'node:crypto';
import {
  AuthorityInfoAccessExtension,
  BasicConstraintsExtension,
  KeyUsageFlags,
  KeyUsagesExtension,
  SubjectAlternativeNameExtension,
  type X509Certificate,
  X509CertificateGenerator,
} from '@peculiar/x509';
import * as asn1js from 'asn1js';
import * as pkijs from 'pkijs';

const rsa = {
  name: 'RSASSA-PKCS1-v1_5',
  hash: 'SHA-256',
  publicExponent: new Uint8Array([1, 0, 1]),
  modulusLength: 2048,
} as const;
const dayMs = 86_400_000;

/** A certificate and the key that signs with it. */
export interface SimSigningCert {
  certificate: X509Certificate;
  privateKey: webcrypto.CryptoKey;
}

/** A document signer: its leaf and the CA certificates above it (issuing CA first, root last). */
export interface AttestationSigner {
  leaf: SimSigningCert;
  chain: X509Certificate[];
}

/** A CA hierarchy that signs attested documents. */
export interface AttestationAuthority {
  root: SimSigningCert;
  issuing: SimSigningCert;
  signer: AttestationSigner;
  /** PEM of the root, what the controller is configured to trust. */
  rootPem: string;
  /** PEM of the issuing CA (for a controller given intermediates). */
  issuingPem: string;
}

async function keys(): Promise<webcrypto.CryptoKeyPair> {
  return webcrypto.subtle.generateKey(rsa, true, ['sign', 'verify']) as Promise<webcrypto.CryptoKeyPair>;
}

function validity(days: number) {
  const now = Date.now();
  return { notBefore: new Date(now - 3_600_000), notAfter: new Date(now + days * dayMs) };
}

async function caCert(name: string, issuer?: SimSigningCert): Promise<SimSigningCert> {
  const pair = await keys();
  const extensions = [
    new BasicConstraintsExtension(true, issuer ? 0 : 1, true),
    new KeyUsagesExtension(KeyUsageFlags.keyCertSign | KeyUsageFlags.cRLSign, true),
  ];
  const certificate = issuer
    ? await X509CertificateGenerator.create({
        subject: `CN=${name}`,
        issuer: issuer.certificate.subject,
        publicKey: pair.publicKey,
        signingKey: issuer.privateKey,
        signingAlgorithm: rsa,
        extensions,
        ...validity(365),
      })
    : await X509CertificateGenerator.createSelfSigned({
        name: `CN=${name}`,
        keys: pair,
        signingAlgorithm: rsa,
        extensions,
        ...validity(3650),
      });
  return { certificate, privateKey: pair.privateKey };
}

/** The file name the simulated PKI repository serves the issuing CA under. */
export const issuingCertificateFile = 'issuing.crt';

/**
 * Issues a document-signing leaf with these DNS names under `issuing`; `caIssuersUrl` goes into its
 * AIA, as Azure's signer names its issuer in Microsoft's PKI repository.
 */
export async function issueAttestationSigner(
  issuing: SimSigningCert,
  dnsNames: string[],
  above: X509Certificate[] = [],
  caIssuersUrl?: string,
): Promise<AttestationSigner> {
  const pair = await keys();
  const certificate = await X509CertificateGenerator.create({
    subject: `CN=${dnsNames[0] ?? 'signer'}`,
    issuer: issuing.certificate.subject,
    publicKey: pair.publicKey,
    signingKey: issuing.privateKey,
    signingAlgorithm: rsa,
    extensions: [
      new BasicConstraintsExtension(false, undefined, true),
      new KeyUsagesExtension(KeyUsageFlags.digitalSignature, true),
      new SubjectAlternativeNameExtension(dnsNames.map((value) => ({ type: 'dns' as const, value }))),
      ...(caIssuersUrl ? [new AuthorityInfoAccessExtension({ caIssuers: caIssuersUrl })] : []),
    ],
    ...validity(365),
  });
  return { leaf: { certificate, privateKey: pair.privateKey }, chain: [issuing.certificate, ...above] };
}

/**
 * A root, an issuing CA and a `<location>.metadata.azure.com` signer; with `pkiUrl`, the signer's
 * AIA names `<pkiUrl>/issuing.crt`.
 */
export async function createAttestationAuthority(
  location = 'eastus',
  rootName = 'Simulated Azure Root G2',
  pkiUrl?: string,
): Promise<AttestationAuthority> {
  const root = await caCert(rootName);
  const issuing = await caCert(`${rootName} Issuing CA`, root);
  const signer = await issueAttestationSigner(
    issuing,
    [`${location}.metadata.azure.com`],
    [root.certificate],
    pkiUrl ? `${pkiUrl}/${issuingCertificateFile}` : undefined,
  );
  return {
    root,
    issuing,
    signer,
    rootPem: root.certificate.toString('pem'),
    issuingPem: issuing.certificate.toString('pem'),
  };
}

/** Which certificates the SignedData carries: the leaf only (as Azure), or the leaf and its issuer. */
export type EmbeddedCertificates = 'leaf' | 'leaf-and-issuer';

/** Signs `content` (the attested JSON) as IMDS does; the base64 DER of a PKCS#7 ContentInfo. */
export async function signAttestedContent(
  content: unknown,
  signer: AttestationSigner,
  embed: EmbeddedCertificates = 'leaf-and-issuer',
): Promise<string> {
  const leaf = pkijs.Certificate.fromBER(signer.leaf.certificate.rawData);
  const embedded = [leaf];
  if (embed === 'leaf-and-issuer' && signer.chain[0]) {
    embedded.push(pkijs.Certificate.fromBER(signer.chain[0].rawData));
  }
  const data = new TextEncoder().encode(JSON.stringify(content));
  const signedData = new pkijs.SignedData({
    version: 1,
    encapContentInfo: new pkijs.EncapsulatedContentInfo({
      eContentType: '1.2.840.113549.1.7.1',
      eContent: new asn1js.OctetString({ valueHex: data }),
    }),
    signerInfos: [
      new pkijs.SignerInfo({
        version: 1,
        sid: new pkijs.IssuerAndSerialNumber({ issuer: leaf.issuer, serialNumber: leaf.serialNumber }),
      }),
    ],
    certificates: embedded,
  });
  await signedData.sign(signer.leaf.privateKey, 0, 'SHA-256');
  const info = new pkijs.ContentInfo({
    contentType: '1.2.840.113549.1.7.2',
    content: signedData.toSchema(true),
  });
  return Buffer.from(info.toSchema().toBER(false)).toString('base64');
}
