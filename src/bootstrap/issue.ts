/**
 * Issuing a node's certificates for the facts a policy (or a human) verified. Every requested
 * certificate is planned against its profile with the VERIFIED name and addresses before any is
 * signed, so a request asking for another node's name or foreign addresses gets nothing at all.
 */
import type { CertificateAuthority } from '../pki/ca.ts';
import {
  type CertificateRequest,
  type IssuedCertificate,
  type IssueOptions,
  issueCertificateAsync,
  type ProfileName,
  planCertificate,
  type VerifiedIdentity,
} from '../pki/profiles.ts';
import type { NodeFacts } from './types.ts';

/** The identity a certificate is issued for: the verified facts, never the request's claims. */
export function identityOf(facts: NodeFacts): VerifiedIdentity {
  return { name: facts.nodeName, dnsNames: facts.dnsNames, ipAddresses: facts.ipAddresses };
}

/** Profiles in a stable order, so that issuance and answers do not depend on the request's key order. */
function profilesOf(requests: Partial<Record<ProfileName, CertificateRequest>>): ProfileName[] {
  return (Object.keys(requests) as ProfileName[]).sort();
}

/**
 * Validates every request against its profile and the facts (rejects with RequestRejectedError
 * naming the first that does not fit), then issues them all, signing off the event loop.
 */
export async function issueForFacts(
  ca: CertificateAuthority,
  requests: Partial<Record<ProfileName, CertificateRequest>>,
  facts: NodeFacts,
  options: IssueOptions = {},
): Promise<Partial<Record<ProfileName, IssuedCertificate>>> {
  const identity = identityOf(facts);
  const profiles = profilesOf(requests);
  for (const profile of profiles) planCertificate(profile, requests[profile] as CertificateRequest, identity);
  const signed = await Promise.all(
    profiles.map((profile) =>
      issueCertificateAsync(ca, profile, requests[profile] as CertificateRequest, identity, options),
    ),
  );
  return Object.fromEntries(profiles.map((profile, i) => [profile, signed[i]]));
}

/** The serial numbers of issued certificates, by profile, for the audit trail. */
export function serialsOf(
  issued: Partial<Record<ProfileName, IssuedCertificate>>,
): Partial<Record<ProfileName, string>> {
  return Object.fromEntries(Object.entries(issued).map(([profile, cert]) => [profile, cert?.serialHex]));
}

/** The PEM of issued certificates, by profile, as the answers carry them. */
export function pemsOf(
  issued: Partial<Record<ProfileName, IssuedCertificate>>,
): Partial<Record<ProfileName, string>> {
  return Object.fromEntries(Object.entries(issued).map(([profile, cert]) => [profile, cert?.pem]));
}
