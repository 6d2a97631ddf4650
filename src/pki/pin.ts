/**
 * CA pins in the kubeadm format: `sha256:` and the hex SHA-256 of the CA certificate's DER
 * SubjectPublicKeyInfo. A node given a pin can fetch the CA bundle over an untrusted channel and
 * check it before trusting anything it says.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { InvalidInputError } from '../errors.ts';
import { decodePem } from './pem.ts';
import { parseCertificate } from './x509.ts';

/** The pin of a DER SubjectPublicKeyInfo. */
export function pinOfSpki(spki: Buffer): string {
  return `sha256:${createHash('sha256').update(spki).digest('hex')}`;
}

/** The pin of a certificate given as PEM (the first certificate if there are several). */
export function pinOfCertificatePem(pem: string): string {
  const [der] = decodePem(pem, 'CERTIFICATE', 'certificate');
  return pinOfSpki(parseCertificate(der as Buffer).spki);
}

/** Parses a pin as kubeadm accepts it (`sha256:` + 64 hex digits, either case); returns the digest. */
export function parsePin(pin: string): Buffer {
  const match = /^sha256:([0-9a-f]{64})$/i.exec(pin.trim());
  if (!match) {
    throw new InvalidInputError(
      `invalid CA pin "${pin}": expected "sha256:" followed by 64 hexadecimal digits`,
    );
  }
  return Buffer.from(match[1] as string, 'hex');
}

/** Whether an SPKI matches any of the pins (constant-time per comparison). */
export function spkiMatchesPins(spki: Buffer, pins: readonly string[]): boolean {
  const digest = createHash('sha256').update(spki).digest();
  return pins.map(parsePin).some((wanted) => timingSafeEqual(wanted, digest));
}
