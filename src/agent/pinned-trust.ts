/**
 * What a node trusts after discovery: exactly the CAs the operator pinned, never one more. The
 * cluster-info bundle is unauthenticated until checked (a man in the middle can append its own CA
 * next to the genuine one), so every certificate in it must match a pin — or be in the CA file —
 * and one that does not is refused by name, not silently dropped: an operator rotating the CA learns
 * which pin to add, and an attack is reported as one. The bundle handed on is re-encoded from the
 * checked DER, so nothing but those certificates ever reaches OpenSSL's PEM reader.
 */
import { ForbiddenError } from '../errors.ts';
import { printable } from '../log.ts';
import { decodePem, encodePem } from '../pki/pem.ts';
import { pinOfSpki, spkiMatchesPins } from '../pki/pin.ts';
import { type ParsedCertificate, parseCertificate } from '../pki/x509.ts';

/** One source of the operator's trust: the `--ca-pin` list, or the certificates of `--ca-file`. */
export interface TrustAnchor {
  /** How the operator gave it, for messages: `--ca-pin`, `--ca-file ca.crt`. */
  flag: string;
  pins: readonly string[];
}

/** The anchor of a PEM CA file: the pins of its certificates, and the file as canonical PEM. */
export function fileAnchor(path: string, pem: string): TrustAnchor & { pem: string } {
  const certificates = decodePem(pem, 'CERTIFICATE', path).map(parseCertificate);
  return {
    flag: `--ca-file ${path}`,
    pins: certificates.map((c) => pinOfSpki(c.spki)),
    pem: canonicalPem(certificates),
  };
}

function canonicalPem(certificates: readonly ParsedCertificate[]): string {
  return certificates.map((c) => encodePem('CERTIFICATE', c.der)).join('');
}

/**
 * Checks the bundle `source` sent against every anchor and returns it as canonical PEM. Throws
 * ForbiddenError `ca-pin-mismatch` when no certificate matches an anchor, `ca-not-pinned` naming
 * each certificate that some anchor does not hold.
 */
export function pinnedBundle(bundlePem: string, anchors: readonly TrustAnchor[], source: string): string {
  const certificates = decodePem(bundlePem, 'CERTIFICATE', `the CA bundle from ${source}`).map(
    parseCertificate,
  );
  for (const { flag, pins } of anchors) {
    const unpinned = certificates.filter((c) => !spkiMatchesPins(c.spki, pins));
    const named = unpinned.map(
      (c) => `${printable(c.subject.text) || 'an empty subject'} (${pinOfSpki(c.spki)})`,
    );
    if (unpinned.length === certificates.length) {
      throw new ForbiddenError(
        `none of the CA certificates from ${source} matches ${flag} (they are ${named.join(', ')}): ` +
          'check the pin, or someone else is answering for the bootstrap endpoint',
        { details: { reason: 'ca-pin-mismatch' } },
      );
    }
    if (unpinned.length > 0) {
      throw new ForbiddenError(
        `the CA bundle from ${source} holds a CA that is not pinned: ${named.join(', ')}; the node trusts ` +
          `only the CAs given with ${flag.replace(/ .*/, '')}: if the cluster really uses it (a CA rotation), ` +
          'give it too; otherwise someone else is answering for the bootstrap endpoint',
        { details: { reason: 'ca-not-pinned', unpinned: unpinned.map((c) => pinOfSpki(c.spki)) } },
      );
    }
  }
  return canonicalPem(certificates);
}
