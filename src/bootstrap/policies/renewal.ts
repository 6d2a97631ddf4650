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
 * once had may since belong to another machine. Without an address source the renewal carries no
 * addresses, so only client certificates can be renewed. A node the cloud no longer knows is refused.
 * The facts say which certificate was renewed, so the impersonation guard lets this node (Ready, by
 * definition) through: the caller proved it holds that node's current key.
 */
import { verify, X509Certificate } from 'node:crypto';
import type { NodeIdentifier } from '../../cloud/types.ts';
import { describeError, type KopsError, NotFoundError } from '../../errors.ts';
import type { CertificateAuthority } from '../../pki/ca.ts';
import { type ParsedCertificate, parseCertificate } from '../../pki/x509.ts';
import {
  bodyDigest,
  decodeRenewalToken,
  type RenewalProof,
  renewalAudience,
  renewalSignedText,
} from '../../protocol/renewal-proof.ts';
import { dependencyFault, isCloudVerdict } from '../dependency.ts';
import type { BootstrapPolicy, BootstrapRequest, NodeFacts, PolicyDecision } from '../types.ts';

/** What the cloud verifies about a node for its serving certificate. */
export type NodeAddresses = Pick<NodeFacts, 'dnsNames' | 'ipAddresses' | 'instanceGroup' | 'instanceId'>;

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
}

/**
 * The renewal policy's address source from the cloud: the providerID the Node registered with (read
 * from the API server by `providerIdOf`), then the cloud's current record of that instance — every
 * IP and DNS name it reports. A Node without a providerID, an instance the cloud does not know or
 * that no longer runs is a NotFoundError (a denial); the cloud failing is its own error (a fault).
 */
export function cloudAddresses(options: {
  providerIdOf: (nodeName: string) => Promise<string | undefined>;
  identifier: NodeIdentifier;
}): (nodeName: string) => Promise<NodeAddresses> {
  return async (nodeName) => {
    const providerID = await options.providerIdOf(nodeName);
    if (!providerID) throw new NotFoundError(`node ${nodeName} has no providerID`);
    const result = (await options.identifier.identify([providerID], { maxAgeMs: 0 })).get(providerID);
    if (!result) throw new NotFoundError(`the cloud did not answer for ${providerID}`);
    if (!result.ok) throw result.error;
    const { identity } = result;
    if (identity.state !== 'running') throw new NotFoundError(`${providerID} is ${identity.state}`);
    const ips = identity.addresses.filter((a) => a.type === 'InternalIP' || a.type === 'ExternalIP');
    const names = identity.addresses.filter((a) => a.type === 'InternalDNS' || a.type === 'ExternalDNS');
    return {
      dnsNames: names.map((a) => a.address),
      ipAddresses: ips.map((a) => a.address),
      instanceGroup: identity.instanceGroup,
      instanceId: identity.instanceId,
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
  ca: CertificateAuthority,
  now: Date,
): string | undefined {
  const x509 = new X509Certificate(certificate.der);
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
  if (!Number.isFinite(signedAt) || Math.abs(now.getTime() - signedAt) > skew) {
    return `the timestamp ${JSON.stringify(proof.timestamp)} is more than ${skew / 1000} s from now`;
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
      try {
        proof = decodeRenewalToken(request.proof.token);
        certificate = parseCertificate(proof.certificate);
      } catch (err) {
        return deny(describeError(err));
      }
      const problem =
        certificateProblem(certificate, options.ca, now) ??
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
      const facts: NodeFacts = {
        nodeName,
        ...addresses,
        renewalOf: certificate.serialHex,
        evidence: {
          renewedSerial: certificate.serialHex,
          renewedNotAfter: certificate.notAfter.toISOString(),
          addresses: options.addressesOf ? 'from the cloud' : 'none (client certificates only)',
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
