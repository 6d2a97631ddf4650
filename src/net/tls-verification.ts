/**
 * Which connection errors are a failed certificate verification. Such a failure means the peer is not
 * one the trusted CA vouches for: that will not fix itself, unlike a refused, reset or silent
 * connection, so callers treat it as final (or as an attack) rather than as a fault to retry.
 */

/** OpenSSL's and Node's codes for "the certificate does not prove what it must". */
const verificationCodes = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'CERT_SIGNATURE_FAILURE',
  'CERT_UNTRUSTED',
  'CERT_REJECTED',
  'INVALID_CA',
  'PATH_LENGTH_EXCEEDED',
  'INVALID_PURPOSE',
  'ERR_TLS_CERT_ALTNAME_INVALID',
]);

/** Whether a connection error is a failed certificate verification (final), not a network fault. */
export function isTlsVerificationFailure(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  return typeof code === 'string' && verificationCodes.has(code);
}
