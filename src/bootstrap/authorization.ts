/**
 * The `Authorization` header of a bootstrap request, turned into the unverified identity proof that
 * the policies check. Schemes are kops' (`x-aws-sts`, `x-aws-sts-v2`, `x-gce-tpm`, `x-pki-tpm`, the
 * callback clouds' `x-<cloud>-id`) plus this implementation's (`x-gce-identity`, `x-kops-renewal`,
 * `Bearer`); the credential after the scheme is passed on untouched.
 */
import { InvalidInputError } from '../errors.ts';
import { type CloudIdScheme, cloudIdSchemes, type IdentityProof } from './types.ts';

/** Largest accepted header value; kops' v1 STS token is about 2 KiB. */
export const maxAuthorizationBytes = 16 * 1024;

const schemes: Record<string, (token: string) => IdentityProof> = {
  'x-aws-sts': (token) => ({ kind: 'aws-sts', version: 1, token }),
  'x-aws-sts-v2': (token) => ({ kind: 'aws-sts', version: 2, token }),
  'x-gce-tpm': (token) => ({ kind: 'gce-tpm', token }),
  'x-gce-identity': (token) => ({ kind: 'gce-identity-token', token }),
  bearer: (token) => ({ kind: 'bootstrap-token', token }),
  'x-pki-tpm': (token) => ({ kind: 'pki-tpm', token }),
  'x-kops-renewal': (token) => ({ kind: 'node-renewal', token }),
  ...Object.fromEntries(
    cloudIdSchemes.map((scheme: CloudIdScheme) => [
      scheme,
      (token: string): IdentityProof => ({ kind: 'cloud-id', scheme, token }),
    ]),
  ),
};

/** Azure's proof has two credentials (the ARM id, then the attested document); every other scheme has one. */
const multiPartSchemes: ReadonlySet<string> = new Set(['x-azure-id']);

/** The schemes this server understands, for error messages and docs. */
export const authorizationSchemes = Object.keys(schemes);

/** Parses an Authorization header value; absent means no proof, an unknown scheme is an input error. */
export function parseAuthorization(header: string | undefined): IdentityProof {
  if (header === undefined || header.trim() === '') return { kind: 'none' };
  if (header.length > maxAuthorizationBytes) {
    throw new InvalidInputError(`the Authorization header exceeds ${maxAuthorizationBytes} bytes`);
  }
  const match = /^\s*(\S+)\s+(\S+(?:\s+\S+)*)\s*$/.exec(header);
  const scheme = match?.[1]?.toLowerCase();
  const make = scheme !== undefined && Object.hasOwn(schemes, scheme) ? schemes[scheme] : undefined;
  const parts = match?.[2]?.split(/\s+/).length ?? 0;
  if (!match || !make || (parts > 1 && !multiPartSchemes.has(scheme as string))) {
    throw new InvalidInputError(
      `unsupported Authorization header: expected "<scheme> <credential>" with a scheme of ${authorizationSchemes.join(', ')}`,
    );
  }
  return make(match[2] as string);
}
