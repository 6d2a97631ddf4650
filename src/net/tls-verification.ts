/**
 * Which connection errors are a failed certificate verification. Such a failure means the peer is not
 * one the trusted CA vouches for: that will not fix itself, unlike a refused, reset or silent
 * connection, so callers treat it as final (or as an attack) rather than as a fault to retry.
 */

/**
 * OpenSSL's and Node's codes for "the certificate does not prove what it must": every X509 verify
 * result Node names (but running out of memory), `UNSPECIFIED` — what Node reports for a verify
 * error it has no name for (an unknown critical extension, a CA without keyCertSign, a digest too
 * weak) — and Node's own host name check.
 */
const verificationCodes = new Set([
  'UNSPECIFIED',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_CRL',
  'UNABLE_TO_DECRYPT_CERT_SIGNATURE',
  'UNABLE_TO_DECRYPT_CRL_SIGNATURE',
  'UNABLE_TO_DECODE_ISSUER_PUBLIC_KEY',
  'CERT_SIGNATURE_FAILURE',
  'CRL_SIGNATURE_FAILURE',
  'CERT_NOT_YET_VALID',
  'CERT_HAS_EXPIRED',
  'CRL_NOT_YET_VALID',
  'CRL_HAS_EXPIRED',
  'ERROR_IN_CERT_NOT_BEFORE_FIELD',
  'ERROR_IN_CERT_NOT_AFTER_FIELD',
  'ERROR_IN_CRL_LAST_UPDATE_FIELD',
  'ERROR_IN_CRL_NEXT_UPDATE_FIELD',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'CERT_CHAIN_TOO_LONG',
  'CERT_REVOKED',
  'INVALID_CA',
  'PATH_LENGTH_EXCEEDED',
  'INVALID_PURPOSE',
  'CERT_UNTRUSTED',
  'CERT_REJECTED',
  'HOSTNAME_MISMATCH',
  'ERR_TLS_CERT_ALTNAME_INVALID',
]);

/** Whether a connection error is a failed certificate verification (final), not a network fault. */
export function isTlsVerificationFailure(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  return typeof code === 'string' && verificationCodes.has(code);
}
