/**
 * Verifies an Azure IMDS attested document: the PKCS#7 SignedData a VM gets from
 * `/metadata/attested/document?nonce=…`, signed by Azure's metadata service. Checked as kops'
 * attest.go checks it, in the same order (cheap checks before chain building):
 *   1. the SignedData signature verifies against the signer certificate it embeds;
 *   2. that signer is named `metadata.azure.com` or `*.metadata.azure.com` in its DNS SANs;
 *   3. the signed JSON names a vmId and a subscription, its nonce is `hex(sha256(body))[:32]` of this
 *      very request body, it was created within the freshness window (5 min + 2 min skew) and has not
 *      expired;
 *   4. the signer chains, through the embedded and configured intermediates, to a configured root.
 * Azure's PKCS#7 carries the signer alone: the intermediates come from the configuration or, when
 * they are not there, from Microsoft's PKI repository through the signer's AIA (intermediates.ts,
 * fetched only after every cheap check passed). A bad document is an UnauthenticatedError; only the
 * repository failing is an UnavailableError (a dependency, retried).
 */
import { createHash, X509Certificate } from 'node:crypto';
import * as asn1js from 'asn1js';
import * as pkijs from 'pkijs';
import { describeError, UnauthenticatedError } from '../../errors.ts';
import { quoted } from '../../quote.ts';
import type { AiaIntermediates } from './intermediates.ts';

/** kops' nonce length: IMDS takes at most 32 characters, 128 bits of the body's SHA-256. */
export const attestedNonceLength = 32;
/** How old a document may be regardless of its own expiry (kops: 5 minutes). */
export const defaultAttestedMaxAgeMs = 5 * 60_000;
/** Clock skew tolerated between node, controller and Azure (kops: 2 minutes). */
export const defaultAttestedClockSkewMs = 2 * 60_000;

const metadataName = 'metadata.azure.com';
const signedDataOid = '1.2.840.113549.1.7.2';
const maxDocumentBytes = 64 * 1024;

/** The nonce kops derives from a bootstrap request body. */
export function nonceForBody(body: Uint8Array): string {
  return createHash('sha256').update(body).digest('hex').slice(0, attestedNonceLength);
}

/** The verified content of an attested document. */
export interface AttestedDocument {
  vmId: string;
  subscriptionId: string;
  nonce: string;
  createdOn: Date;
  expiresOn?: Date;
  /** The signer's DNS names (for the audit trail). */
  signerNames: string[];
}

/** Trust anchors and freshness bounds of a verifier. */
export interface AttestedDocumentVerifierOptions {
  /** PEM certificates the signer must chain to. */
  roots: readonly string[];
  /** PEM intermediates the chain may pass through besides those the document embeds. */
  intermediates?: readonly string[];
  /** Where missing intermediates are fetched (default: nowhere). */
  fetchIntermediates?: Pick<AiaIntermediates, 'chainFor'>;
  maxAgeMs?: number;
  clockSkewMs?: number;
  now?: () => Date;
}

function reject(message: string, cause?: unknown): UnauthenticatedError {
  return new UnauthenticatedError(
    `attested document rejected: ${message}`,
    cause === undefined ? undefined : { cause },
  );
}

/** Splits a PEM bundle into pkijs certificates. */
export function parsePemCertificates(pem: string): pkijs.Certificate[] {
  const blocks = pem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  return blocks.map((block) => pkijs.Certificate.fromBER(new X509Certificate(block).raw));
}

/**
 * Parses IMDS's timestamp format, `MM/DD/YY HH:MM:SS ±hhmm` (Go layout `01/02/06 15:04:05 -0700`);
 * undefined when it does not match.
 */
export function parseAttestedTime(value: unknown): Date | undefined {
  if (typeof value !== 'string') return undefined;
  const m = /^(\d{2})\/(\d{2})\/(\d{2}) (\d{2}):(\d{2}):(\d{2}) ([+-])(\d{2})(\d{2})$/.exec(value);
  if (!m) return undefined;
  const [mo, d, y, h, mi, s, oh, om] = [m[1], m[2], m[3], m[4], m[5], m[6], m[8], m[9]].map(Number) as [
    number,
    number,
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 59 || om > 59) return undefined;
  const offsetMinutes = (oh * 60 + om) * (m[7] === '-' ? -1 : 1);
  const local = Date.UTC(2000 + y, mo - 1, d, h, mi, s);
  // Date.UTC rolls 02/31 over into March; such a date is malformed, not March.
  if (new Date(local).getUTCDate() !== d) return undefined;
  return new Date(local - offsetMinutes * 60_000);
}

/** Formats a time as IMDS does (UTC, `-0000` as Azure writes it). */
export function formatAttestedTime(date: Date): string {
  const two = (n: number) => String(n).padStart(2, '0');
  return (
    `${two(date.getUTCMonth() + 1)}/${two(date.getUTCDate())}/${two(date.getUTCFullYear() % 100)} ` +
    `${two(date.getUTCHours())}:${two(date.getUTCMinutes())}:${two(date.getUTCSeconds())} -0000`
  );
}

/** The DNS names of a certificate's subjectAltName. */
function dnsNamesOf(certificate: pkijs.Certificate): string[] {
  let san: string;
  try {
    san = new X509Certificate(Buffer.from(certificate.toSchema().toBER(false))).subjectAltName ?? '';
  } catch (err) {
    // pkijs reads some certificates OpenSSL does not (an empty BOOLEAN for NULL parameters).
    throw reject('the signer certificate is unreadable', err);
  }
  return san
    .split(', ')
    .filter((entry) => entry.startsWith('DNS:'))
    .map((entry) => entry.slice(4));
}

function isMetadataName(name: string): boolean {
  return name === metadataName || (name.endsWith(`.${metadataName}`) && !name.startsWith('*'));
}

/** Names shown in a refusal: a self-made signer may carry a 16 KiB header's worth of them. */
const shownNames = 3;

/** The signer's names for a refusal: the first few, quoted and cut, and how many there are. */
function describeNames(names: readonly string[]): string {
  if (names.length === 0) return 'names: none';
  const shown = names.slice(0, shownNames).map((name) => quoted(name));
  return names.length > shownNames
    ? `${names.length} names: ${shown.join(', ')}, …`
    : `names: ${shown.join(', ')}`;
}

/** Verifies attested documents against configured trust anchors. */
export class AttestedDocumentVerifier {
  readonly #roots: pkijs.Certificate[];
  readonly #intermediates: pkijs.Certificate[];
  readonly #fetchIntermediates: Pick<AiaIntermediates, 'chainFor'> | undefined;
  readonly #maxAgeMs: number;
  readonly #clockSkewMs: number;
  readonly #now: () => Date;

  constructor(options: AttestedDocumentVerifierOptions) {
    this.#roots = options.roots.flatMap(parsePemCertificates);
    this.#intermediates = (options.intermediates ?? []).flatMap(parsePemCertificates);
    this.#fetchIntermediates = options.fetchIntermediates;
    this.#maxAgeMs = options.maxAgeMs ?? defaultAttestedMaxAgeMs;
    this.#clockSkewMs = options.clockSkewMs ?? defaultAttestedClockSkewMs;
    this.#now = options.now ?? (() => new Date());
  }

  /** How long a verified document stays acceptable after it was created (its replay-guard lifetime). */
  get acceptedForMs(): number {
    return this.#maxAgeMs + this.#clockSkewMs;
  }

  /** The verified content of `signature` (base64 PKCS#7) for a request with this body. */
  async verify(signature: string, body: Uint8Array): Promise<AttestedDocument> {
    const signedData = parseSignedData(signature);
    const signer = await verifySignature(signedData);
    const signerNames = dnsNamesOf(signer);
    if (!signerNames.some(isMetadataName)) {
      throw reject(`the signer is not Azure's metadata service (${describeNames(signerNames)})`);
    }
    const content = this.#checkContent(signedData, body);
    await this.#checkChain(signer, signedData.certificates ?? []);
    return { ...content, signerNames };
  }

  #checkContent(signedData: pkijs.SignedData, body: Uint8Array) {
    const raw = signedData.encapContentInfo.eContent?.getValue();
    if (!raw) throw reject('it carries no signed content');
    let parsed: unknown;
    try {
      parsed = JSON.parse(Buffer.from(raw).toString('utf8'));
    } catch (err) {
      throw reject('the signed content is not JSON', err);
    }
    if (parsed === null || typeof parsed !== 'object') throw reject('the signed content is not an object');
    const { vmId, subscriptionId, nonce, timeStamp } = parsed as Record<string, unknown>;
    if (typeof vmId !== 'string' || !vmId) throw reject('it names no vmId');
    if (typeof subscriptionId !== 'string' || !subscriptionId) throw reject('it names no subscriptionId');
    const expected = nonceForBody(body);
    if (nonce !== expected) {
      throw reject(`its nonce is not this request body's (signed for another request)`);
    }
    const stamps = (timeStamp ?? {}) as Record<string, unknown>;
    const createdOn = parseAttestedTime(stamps['createdOn']);
    if (!createdOn) throw reject('its createdOn is missing or malformed');
    const now = this.#now().getTime();
    if (createdOn.getTime() > now + this.#clockSkewMs) throw reject('it was created in the future');
    if (createdOn.getTime() < now - this.acceptedForMs) {
      throw reject(
        `it was created at ${createdOn.toISOString()}, more than ${this.acceptedForMs / 1000} s ago (replayed or stale)`,
      );
    }
    let expiresOn: Date | undefined;
    if (stamps['expiresOn'] !== undefined && stamps['expiresOn'] !== '') {
      expiresOn = parseAttestedTime(stamps['expiresOn']);
      if (!expiresOn) throw reject('its expiresOn is malformed');
      if (expiresOn < createdOn) throw reject('it expires before it was created');
      if (expiresOn.getTime() < now - this.#clockSkewMs) {
        throw reject(`it expired at ${expiresOn.toISOString()}`);
      }
    }
    return { vmId, subscriptionId, nonce: expected, createdOn, ...(expiresOn ? { expiresOn } : {}) };
  }

  async #checkChain(signer: pkijs.Certificate, embedded: pkijs.CertificateSetItem[]): Promise<void> {
    const known = [
      ...embedded.filter((c): c is pkijs.Certificate => c instanceof pkijs.Certificate && c !== signer),
      ...this.#intermediates,
    ];
    let failure = await this.#chainFailure(signer, known);
    if (failure === undefined) return;
    // Fetch only when the issuer is missing: a present issuer that does not verify is a broken chain.
    if (this.#fetchIntermediates && !known.some((c) => c.subject.isEqual(signer.issuer))) {
      failure = await this.#chainFailure(signer, [
        ...known,
        ...(await this.#fetchIntermediates.chainFor(signer)),
      ]);
      if (failure === undefined) return;
    }
    throw reject(`its signer does not chain to a trusted root: ${failure}`);
  }

  /** Why `signer` does not chain to a root through `intermediates`; undefined when it does. */
  async #chainFailure(
    signer: pkijs.Certificate,
    intermediates: pkijs.Certificate[],
  ): Promise<string | undefined> {
    const engine = new pkijs.CertificateChainValidationEngine({
      trustedCerts: this.#roots,
      certs: [...intermediates, signer], // pkijs validates the path of the last certificate
      checkDate: this.#now(),
    });
    try {
      const outcome = await engine.verify();
      return outcome.result ? undefined : outcome.resultMessage;
    } catch (err) {
      return describeError(err);
    }
  }
}

function parseSignedData(signature: string): pkijs.SignedData {
  if (!signature || signature.length > maxDocumentBytes * 2 || !/^[A-Za-z0-9+/]+={0,2}$/.test(signature)) {
    throw reject('the signature is not base64');
  }
  const der = Buffer.from(signature, 'base64');
  try {
    const asn = asn1js.fromBER(new Uint8Array(der));
    if (asn.offset === -1) throw new Error(asn.result.error);
    // fromBER stops after the first value: bytes after it would give one proof many spellings.
    if (asn.offset !== der.length) throw new Error(`${der.length - asn.offset} bytes after it`);
    const info = new pkijs.ContentInfo({ schema: asn.result });
    if (info.contentType !== signedDataOid) throw new Error(`content type ${info.contentType}`);
    return new pkijs.SignedData({ schema: info.content });
  } catch (err) {
    throw reject(`it is not a PKCS#7 SignedData: ${describeError(err)}`, err);
  }
}

async function verifySignature(signedData: pkijs.SignedData): Promise<pkijs.Certificate> {
  if (signedData.signerInfos.length !== 1) throw reject('it must have exactly one signer');
  let result: pkijs.SignedDataVerifyResult;
  try {
    result = await signedData.verify({ signer: 0, checkChain: false, extendedMode: true });
  } catch (err) {
    throw reject(`its signature does not verify: ${describeError(err)}`, err);
  }
  const signer = result.signerCertificate;
  if (!result.signatureVerified || !signer) throw reject('its signature does not verify');
  return signer;
}
