/**
 * Issuing a node's certificates for the facts a policy (or a human) verified. Every requested
 * certificate is planned against its profile with the VERIFIED name and addresses before any is
 * signed, so a request asking for another node's name or foreign addresses gets nothing at all; and
 * no node certificate ever carries a name or address of the cluster's API server, or a wildcard
 * (src/pki/reserved-names.ts), whoever verified or approved it.
 */
import type { CertificateAuthority } from '../pki/ca.ts';
import {
  type CertificatePlan,
  type CertificateRequest,
  type IssuedCertificate,
  type IssueOptions,
  issueCertificateAsync,
  type ProfileName,
  planCertificate,
  type VerifiedIdentity,
} from '../pki/profiles.ts';
import {
  assertNoReservedNames,
  defaultReservedNames,
  type NamesToCheck,
  type ReservedNames,
} from '../pki/reserved-names.ts';
import type { NodeFacts } from './types.ts';

/** How node certificates are issued: the profile options, and who is told of each issuance. */
export interface NodeIssueOptions extends IssueOptions {
  /** Told of the certificates just signed and the facts they were signed for (the expiry ledger). */
  onIssued?: (issued: readonly IssuedCertificate[], facts: NodeFacts) => void;
}

/**
 * The identity a certificate is issued for: the verified facts, never the request's claims — the
 * machine's incarnation among them, which the node's own certificates then name (src/pki/incarnation.ts).
 */
export function identityOf(facts: NodeFacts): VerifiedIdentity {
  return {
    name: facts.nodeName,
    dnsNames: facts.dnsNames,
    ipAddresses: facts.ipAddresses,
    ...(facts.incarnationId === undefined ? {} : { incarnationId: facts.incarnationId }),
  };
}

/** Profiles in a stable order, so that issuance and answers do not depend on the request's key order. */
function profilesOf(requests: Partial<Record<ProfileName, CertificateRequest>>): ProfileName[] {
  return (Object.keys(requests) as ProfileName[]).sort();
}

/**
 * Refuses (RequestRejectedError `reserved-name`, naming it) a request in which any name is the API
 * server's or a wildcard: the node name, every subjectAltName a CSR asks for, and the addresses of
 * `facts` when given. Called on the raw request before any policy runs or anything is queued, and
 * again on the verified facts before anything is signed.
 */
export function assertNoReservedNamesIn(
  requests: Partial<Record<ProfileName, CertificateRequest>>,
  facts: Partial<Pick<NodeFacts, 'nodeName' | 'dnsNames' | 'ipAddresses'>>,
  reserved: ReservedNames = defaultReservedNames,
): void {
  const groups: NamesToCheck[] = [
    { what: 'node name', dnsNames: facts.nodeName ? [facts.nodeName] : [] },
    ...profilesOf(requests).map((profile) => {
      const request = requests[profile];
      const san = request?.kind === 'csr' ? request.extensions.subjectAltName : undefined;
      return { what: `${profile}: subjectAltName`, dnsNames: san?.dnsNames, ipAddresses: san?.ipAddresses };
    }),
    { what: 'verified addresses', dnsNames: facts.dnsNames, ipAddresses: facts.ipAddresses },
  ];
  assertNoReservedNames(groups, reserved);
}

/**
 * What each certificate will contain, every request checked first: no reserved name, then its
 * profile against the facts (RequestRejectedError naming the first that does not fit).
 */
export function planForFacts(
  requests: Partial<Record<ProfileName, CertificateRequest>>,
  facts: NodeFacts,
  reserved: ReservedNames = defaultReservedNames,
): Partial<Record<ProfileName, CertificatePlan>> {
  assertNoReservedNamesIn(requests, facts, reserved);
  const identity = identityOf(facts);
  return Object.fromEntries(
    profilesOf(requests).map((profile) => [
      profile,
      planCertificate(profile, requests[profile] as CertificateRequest, identity),
    ]),
  );
}

/**
 * Validates every request against its profile and the facts (rejects with RequestRejectedError
 * naming the first that does not fit, or the first reserved name), then issues them all, signing off
 * the event loop.
 */
export async function issueForFacts(
  ca: CertificateAuthority,
  requests: Partial<Record<ProfileName, CertificateRequest>>,
  facts: NodeFacts,
  options: NodeIssueOptions = {},
): Promise<Partial<Record<ProfileName, IssuedCertificate>>> {
  planForFacts(requests, facts, options.reserved);
  const identity = identityOf(facts);
  const profiles = profilesOf(requests);
  const signed = await Promise.all(
    profiles.map((profile) =>
      issueCertificateAsync(ca, profile, requests[profile] as CertificateRequest, identity, options),
    ),
  );
  options.onIssued?.(signed, facts);
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
