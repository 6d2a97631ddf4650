/**
 * `renewal`: a node renews its certificates before they expire with its current kubelet client
 * certificate as proof (src/protocol/renewal-proof.ts), so that no node — kops' 455-day ones
 * included — silently expires. The certificate must chain to the cluster CA, be unexpired, be a
 * client certificate of `system:node:<name>` in `system:nodes`; the signature must verify with its
 * key over this exact body's hash, a fresh timestamp and this cluster's audience. That binding is
 * what keeps a proof to one request: with another body it does not verify, so no replay marker is
 * written; the same body again (a retry) passes and certifies only its own keys.
 *
 * The node name is the certificate's; the addresses of a new serving certificate come from the
 * cloud's record of that node (`addressesOf`), never from the old certificate: an address the node
 * once had may since belong to another machine. The cloud's record is found through the Node's
 * providerID, which the kubelet writes itself, so the node's name must be one of that instance's
 * names (the CSR approver's rule, `assessInstance`): a node cannot point its providerID at another
 * machine and renew into that machine's addresses. Without an address source the renewal carries no
 * addresses, so only client certificates can be renewed. A node the cloud no longer knows, or whose
 * Node is gone, is refused.
 *
 * A node name can outlive its machine (GCE recreates an instance under its name, an IP-based name
 * follows its address), so the renewal is also bound to the machine the presented certificate was
 * issued to (`incarnationProblem`): a certificate that names its machine (the incarnation extension,
 * src/pki/incarnation.ts) renews only while the cloud reports that machine under the name; one that
 * names none (kops', the kube-controller-manager's) only if it was not issued before the machine now
 * of that name came to be, and not at all with `unmarked: refuse`. What is renewed names the machine
 * of now.
 *
 * A renewal proves the node's own identity and nothing more, so what it may be issued is bounded by
 * the certificate it presents (`renewalScope`): the node's own certificates only (its kubelet client
 * certificate, and a serving certificate when the cloud verified its addresses) — never kube-proxy's,
 * kube-router's or Cilium's, which are other identities — and none valid for longer than the
 * presented certificate was. The facts say which certificate was renewed, so the impersonation guard
 * lets this node (Ready, by definition) through: the caller proved it holds that node's current key.
 */

import { verify, X509Certificate } from 'node:crypto';
import type { Incarnation, NodeIdentifier } from '../../cloud/types.ts';
import { assessInstance } from '../../controllers/csr-approver/checks.ts';
import { withDeadline } from '../../deadline.ts';
import { describeError, ForbiddenError, InternalError, KopsError, NotFoundError } from '../../errors.ts';
import type { CertificateAuthority } from '../../pki/ca.ts';
import { backdateMs, type ProfileName } from '../../pki/profiles.ts';
import { type ParsedCertificate, parseCertificate } from '../../pki/x509.ts';
import {
  bodyDigest,
  decodeRenewalToken,
  type RenewalProof,
  renewalAudience,
  renewalSignedText,
} from '../../protocol/renewal-proof.ts';
import { defaultCloudLookupTimeoutMs, dependencyFault, isCloudVerdict } from '../dependency.ts';
import type { BootstrapPolicy, BootstrapRequest, NodeFacts, PolicyDecision } from '../types.ts';
import { describeAge } from './proof-age.ts';

/** What the cloud verifies about a node for its serving certificate, and which machine bears its name. */
export type NodeAddresses = Pick<NodeFacts, 'dnsNames' | 'ipAddresses' | 'instanceGroup' | 'instanceId'> & {
  /** The incarnation of the machine that bears the node's name now, when the cloud says it. */
  incarnation?: Incarnation;
};

export interface RenewalPolicyOptions {
  clusterName: string;
  /** The CA whose certificates (any of its bundle) the kubelet client certificates chain to. */
  ca: CertificateAuthority;
  /**
   * The node's current addresses from the cloud; throws NotFoundError (or another cloud verdict)
   * when the cloud does not know the node. Absent: renewals carry no addresses.
   */
  addressesOf?: (nodeName: string) => Promise<NodeAddresses>;
  /** How far the timestamp may be from now (default 5 minutes). */
  maxSkewMs?: number;
  /**
   * Whether a certificate that names no machine renews where the cloud names the machine of now
   * (default `allow`, within {@link unmarkedBackdateMs} of the machine's creation); `refuse` ends that
   * allowance once every node holds a certificate that names its machine.
   */
  unmarked?: UnmarkedRenewals;
  /** Told the verdict on each such certificate: how an operator sees when `refuse` would cost nothing. */
  countUnmarked?: (verdict: 'approve' | 'deny') => void;
}

/** What the renewal policy does with a certificate that names no machine, where the cloud names one. */
export type UnmarkedRenewals = 'allow' | 'refuse';

/**
 * The renewal policy's address source from the cloud: the providerID the Node registered with (read
 * from the API server by `providerIdOf`, which throws NotFoundError when the Node is gone), then the
 * cloud's current record of that instance — every IP and DNS name it reports. A Node without a
 * providerID, an instance the cloud does not know or that no longer runs, and a node whose name is
 * none of its instance's names (the kubelet writes its own providerID: the CSR approver's rule,
 * `assessInstance`) are verdicts (a denial); the cloud failing or not answering within
 * `timeoutMs` is its own error (a fault).
 */
export function cloudAddresses(options: {
  providerIdOf: (nodeName: string) => Promise<string | undefined>;
  identifier: NodeIdentifier;
  timeoutMs?: number;
}): (nodeName: string) => Promise<NodeAddresses> {
  return async (nodeName) => {
    const providerID = await options.providerIdOf(nodeName);
    if (!providerID) throw new NotFoundError(`node ${nodeName} has no providerID`);
    const timeoutMs = options.timeoutMs ?? defaultCloudLookupTimeoutMs;
    const results = await withDeadline(
      options.identifier.identify([providerID], { maxAgeMs: 0 }),
      timeoutMs,
      `looking up ${providerID}`,
    );
    const result = results.get(providerID);
    if (!result) throw new NotFoundError(`the cloud did not answer for ${providerID}`);
    if (!result.ok) throw result.error;
    const { identity } = result;
    if (identity.state !== 'running') throw new NotFoundError(`${providerID} is ${identity.state}`);
    const named = assessInstance({ nodeName, serving: false, dnsNames: [], ipAddresses: [] }, identity);
    if (named.action === 'deny') throw new ForbiddenError(named.message);
    const ips = identity.addresses.filter((a) => a.type === 'InternalIP' || a.type === 'ExternalIP');
    const names = identity.addresses.filter((a) => a.type === 'InternalDNS' || a.type === 'ExternalDNS');
    return {
      dnsNames: names.map((a) => a.address),
      ipAddresses: ips.map((a) => a.address),
      instanceGroup: identity.instanceGroup,
      instanceId: identity.instanceId,
      ...(identity.incarnation ? { incarnation: identity.incarnation } : {}),
    };
  };
}

/** Default freshness window of a renewal proof. */
export const defaultRenewalMaxSkewMs = 5 * 60_000;

const nodePrefix = 'system:node:';

function deny(reason: string): PolicyDecision {
  return { verdict: 'deny', reasons: [`renewal refused: ${reason}`] };
}

/** The reason `certificate` cannot vouch for a node now, or undefined (then `nodeName` is its node). */
function certificateProblem(
  certificate: ParsedCertificate,
  x509: X509Certificate,
  ca: CertificateAuthority,
  now: Date,
): string | undefined {
  const issuer = ca.certificates.find((c) => x509.checkIssued(new X509Certificate(c.parsed.der)));
  if (!issuer || !x509.verify(issuer.parsed.publicKey)) return 'the certificate is not from the cluster CA';
  if (certificate.notAfter <= now) return `the certificate expired on ${certificate.notAfter.toISOString()}`;
  if (certificate.notBefore > now) return 'the certificate is not valid yet';
  const { commonName, organizations } = certificate.subject;
  if (!commonName?.startsWith(nodePrefix) || !organizations.includes('system:nodes')) {
    return `the certificate is not a node's (${certificate.subject.text})`;
  }
  if (!certificate.extensions.extKeyUsage?.includes('clientAuth'))
    return 'the certificate is not a client certificate';
  return undefined;
}

/**
 * How long before it was issued a certificate that names no incarnation may start, at most: kops
 * backdates what it issues 48 hours (pkg/pki), the kube-controller-manager's signer and this server
 * 5 minutes; and 5 minutes more for the clocks of the issuer and of the cloud.
 */
const unmarkedBackdateMs = 48 * 3_600_000 + 5 * 60_000;

/**
 * Why `certificate` was issued to another machine than `incarnation`, the one that bears `nodeName`
 * now, or undefined. A certificate naming its machine (this server's, since the cloud verified one)
 * must name this one. One naming none (kops', the kube-controller-manager's, this server's without a
 * cloud) must not have been issued before this machine came to be: it would be an earlier machine's,
 * which nothing else tells apart; with `unmarked: refuse`, none renews. The id is compared before the
 * times, so a certificate of this machine renews however its clock and the cloud's differ.
 */
function incarnationProblem(
  certificate: ParsedCertificate,
  nodeName: string,
  incarnation: Incarnation,
  unmarked: UnmarkedRenewals,
): string | undefined {
  const issuedTo = certificate.extensions.incarnationId;
  if (issuedTo !== undefined) {
    if (issuedTo === incarnation.id) return undefined;
    return `the certificate was issued to another machine of that name: instance id ${issuedTo}, but ${nodeName} is now instance id ${incarnation.id}; the machine of now joins with its own cloud proof`;
  }
  if (unmarked === 'refuse') {
    return `the certificate names no machine and this cluster renews only those that do (unmarked: refuse); instance ${incarnation.id} joins again with its cloud proof`;
  }
  const { createdAt } = incarnation;
  if (createdAt && certificate.notBefore.getTime() + unmarkedBackdateMs < createdAt.getTime()) {
    return `the certificate was issued before this machine existed: it is valid from ${certificate.notBefore.toISOString()} and instance ${incarnation.id} was created (or last started) at ${createdAt.toISOString()}; the machine joins again with its cloud proof`;
  }
  return undefined;
}

/** The reason the signature does not bind this request, or undefined. */
function bindingProblem(
  proof: RenewalProof,
  certificate: ParsedCertificate,
  request: BootstrapRequest,
  options: RenewalPolicyOptions,
  now: Date,
): string | undefined {
  if (proof.audience !== renewalAudience(options.clusterName))
    return `the audience is ${JSON.stringify(proof.audience)}`;
  const signedAt = Date.parse(proof.timestamp);
  const skew = options.maxSkewMs ?? defaultRenewalMaxSkewMs;
  if (!Number.isFinite(signedAt)) return `the timestamp ${JSON.stringify(proof.timestamp)} is not a time`;
  const age = now.getTime() - signedAt;
  if (Math.abs(age) > skew) {
    return `the proof was signed at ${proof.timestamp}, ${describeAge(age)}; proofs are accepted within ${skew / 1000} s of this controller's clock (check the node's clock)`;
  }
  if (proof.bodySha256 !== bodyDigest(request.body)) return 'the proof was made for another request body';
  const signed = renewalSignedText(proof);
  let valid = false;
  try {
    valid = verify('sha256', signed, certificate.publicKey, proof.signature);
  } catch {
    valid = false;
  }
  return valid ? undefined : "the signature does not verify with the certificate's key";
}

/** The `renewal` policy; abstains for requests without a renewal proof. */
export function renewalPolicy(options: RenewalPolicyOptions): BootstrapPolicy {
  return {
    name: 'renewal',
    async evaluate(request, context) {
      if (request.proof.kind !== 'node-renewal') return { verdict: 'abstain', reasons: ['no renewal proof'] };
      const now = context.now();
      let proof: RenewalProof;
      let certificate: ParsedCertificate;
      let x509: X509Certificate;
      try {
        proof = decodeRenewalToken(request.proof.token);
        certificate = parseCertificate(proof.certificate);
        x509 = new X509Certificate(certificate.der);
      } catch (err) {
        // The parsers' errors name what is wrong; OpenSSL's name its internals ("PEM routines::no
        // start line" for DER it cannot read).
        return deny(err instanceof KopsError ? describeError(err) : 'the certificate is unreadable');
      }
      const problem =
        certificateProblem(certificate, x509, options.ca, now) ??
        bindingProblem(proof, certificate, request, options, now);
      if (problem) return deny(problem);
      const nodeName = (certificate.subject.commonName as string).slice(nodePrefix.length);
      if (request.claimedNodeName !== undefined && request.claimedNodeName !== nodeName) {
        return deny(`the request names ${request.claimedNodeName}, the certificate ${nodeName}`);
      }
      if (!options.addressesOf && request.certificates['kubelet-server']) {
        return deny('this server has no source of verified addresses, so it renews client certificates only');
      }
      let addresses: NodeAddresses = { dnsNames: [], ipAddresses: [] };
      if (options.addressesOf) {
        try {
          addresses = await options.addressesOf(nodeName);
        } catch (err) {
          if (isCloudVerdict(err))
            return deny(`the cloud does not vouch for node ${nodeName}: ${(err as KopsError).message}`);
          throw dependencyFault('policy:renewal', err);
        }
      }
      const { incarnation, ...verified } = addresses;
      if (incarnation) {
        const otherMachine = incarnationProblem(
          certificate,
          nodeName,
          incarnation,
          options.unmarked ?? 'allow',
        );
        if (certificate.extensions.incarnationId === undefined)
          options.countUnmarked?.(otherMachine ? 'deny' : 'approve');
        if (otherMachine) return deny(otherMachine);
      }
      const facts: NodeFacts = {
        nodeName,
        ...verified,
        // What is renewed names the machine of now, whatever the presented certificate named.
        ...(incarnation ? { incarnationId: incarnation.id } : {}),
        renewalOf: certificate.serialHex,
        evidence: {
          renewedSerial: certificate.serialHex,
          renewedNotAfter: certificate.notAfter.toISOString(),
          addresses: options.addressesOf ? 'from the cloud' : 'none (client certificates only)',
          ...(incarnation ? { incarnation: incarnation.id } : {}),
        },
      };
      return {
        verdict: 'approve',
        facts,
        reasons: [`node ${nodeName} renewed with its current certificate`],
      };
    },
  };
}

/** What a renewal may be issued, bounded by the certificate it presents. */
export interface RenewalScope {
  /**
   * The longest lifetime a renewed certificate may be issued for: the presented certificate's
   * validity less the new certificate's backdating (and a second for the rounding of certificate
   * times), so that the new one is valid no longer than it.
   */
  maxLifetimeMs: number;
  /** Why `profile` is not renewed with this proof, or undefined when it is. */
  refusal(profile: ProfileName): string | undefined;
}

/** The profiles of the node's own identity, which a kubelet client certificate renews. */
const renewedProfiles: readonly ProfileName[] = ['kubelet', 'kubelet-server'];

/**
 * What the renewal approved in `facts` may be issued (undefined when the facts renew nothing): the
 * node's own certificates — `kubelet`, and `kubelet-server` when the cloud verified addresses for it
 * — for no longer than the presented certificate was valid. Read from the proof the policy verified,
 * which must carry the certificate `facts.renewalOf` names: anything else is a bug (InternalError).
 */
export function renewalScope(request: BootstrapRequest, facts: NodeFacts): RenewalScope | undefined {
  if (facts.renewalOf === undefined) return undefined;
  let certificate: ParsedCertificate | undefined;
  try {
    if (request.proof.kind === 'node-renewal')
      certificate = parseCertificate(decodeRenewalToken(request.proof.token).certificate);
  } catch {
    certificate = undefined;
  }
  if (certificate?.serialHex !== facts.renewalOf) {
    throw new InternalError(
      `the facts renew certificate ${facts.renewalOf}, which the request's proof does not carry`,
    );
  }
  const hasAddresses = facts.dnsNames.length > 0 || facts.ipAddresses.length > 0;
  return {
    maxLifetimeMs: certificate.notAfter.getTime() - certificate.notBefore.getTime() - backdateMs - 1000,
    refusal: (profile) => {
      if (!renewedProfiles.includes(profile))
        return `a renewal renews the node's own certificates (${renewedProfiles.join(', ')}) only`;
      if (profile === 'kubelet-server' && !hasAddresses)
        return 'no verified address for a serving certificate: this renewal renews the client certificate only';
      return undefined;
    },
  };
}
