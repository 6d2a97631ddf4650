/**
 * The shapes shared by the bootstrap server, the approval policies, the queue and the audit trail.
 * Nothing a node sends is trusted: a {@link BootstrapRequest} carries claims and proofs; only a policy
 * turns proofs into a {@link NodeFacts} record of verified facts, and certificates are issued for
 * those facts alone.
 */
import type { CertificateRequest, ProfileName } from '../pki/profiles.ts';
import type { ChallengeClaim } from '../protocol/challenge.ts';

/** How a node proves who it is, exactly as it arrived (unverified). */
export type IdentityProof =
  /** kops `x-aws-sts` (v1: signed headers) or `x-aws-sts-v2` (presigned URL) GetCallerIdentity. */
  | { kind: 'aws-sts'; version: 1 | 2; token: string }
  /** kops `x-gce-tpm`: data signed with the instance's shielded-VM key. */
  | { kind: 'gce-tpm'; token: string }
  /** A Google instance identity JWT (metadata server `identity?format=full`). */
  | { kind: 'gce-identity-token'; token: string }
  /** A kubeadm-format bootstrap token `<id>.<secret>`. */
  | { kind: 'bootstrap-token'; token: string }
  /**
   * kops' id-only proofs of the callback clouds (`x-hetzner-id <server id>`, ...; Azure's
   * `x-azure-id <ARM id> <attested document>`): a claim the cloud's API and the callback challenge
   * must bear out. `token` is everything after the scheme.
   */
  | { kind: 'cloud-id'; scheme: CloudIdScheme; token: string }
  /** kops metal `x-pki-tpm`: data signed with the host's registered ECDSA key. */
  | { kind: 'pki-tpm'; token: string }
  /**
   * `x-kops-renewal`: the node's current kubelet client certificate and a signature with its key over
   * the body hash, a timestamp and the audience (src/protocol/renewal-proof.ts).
   */
  | { kind: 'node-renewal'; token: string }
  /** No proof: only policies that ask a human (queue) or approve anything can act on it. */
  | { kind: 'none' };

/** The Authorization schemes of kops' id-only proofs, one per cloud. */
export const cloudIdSchemes = [
  'x-hetzner-id',
  'x-openstack-id',
  'x-digitalocean-droplet-id',
  'x-scaleway-instance-server-id',
  'x-azure-id',
  'x-linode-instance-id',
] as const;
export type CloudIdScheme = (typeof cloudIdSchemes)[number];

/** A request for node credentials, as received by the bootstrap server. */
export interface BootstrapRequest {
  /** Stable id for logs, the audit trail and the pending handle (random, not from the node). */
  id: string;
  /** The exact request body; proofs bind to its SHA-256. */
  body: Buffer;
  /** The node name the request claims (from the CSR subject); unverified. */
  claimedNodeName?: string;
  /** What is to be certified, per profile (a CSR already checked for proof of possession, or a kops public key). */
  certificates: Partial<Record<ProfileName, CertificateRequest>>;
  proof: IdentityProof;
  /**
   * The callback challenge the node offers (native API; the kops handler reads its body's only when a
   * policy calls for it). Unverified: only answering it at the policy's endpoint counts.
   */
  challenge?: ChallengeClaim;
  /** The TCP peer (after no proxy-header trust). */
  remoteAddress: string;
  receivedAt: Date;
}

/** Facts about a node that a policy verified with an authority (cloud API, inventory, human, token store). */
export interface NodeFacts {
  /** The node name the certificate will carry. */
  nodeName: string;
  /** The kops instance group, when the authority knows it. */
  instanceGroup?: string;
  /** Addresses the kubelet-server certificate may name. */
  dnsNames: string[];
  ipAddresses: string[];
  /** The cloud's id of the instance (`i-…`, GCE instance id, metal host name). */
  instanceId?: string;
  /**
   * The id of this incarnation of the machine (see `Incarnation` in src/cloud/types.ts), which the
   * node's certificates carry so that their renewal is bound to this machine; unset where the
   * authority knows none (a token, a human, a metal host).
   */
  incarnationId?: string;
  /**
   * `host:port` of the node's callback-challenge server on an address the cloud reports for the
   * instance. When set, nothing is issued until the node there proves it holds the challenge secret
   * its request carried (the callback clouds; kops' `UseChallengeCallback`).
   */
  challengeEndpoint?: string;
  /**
   * The serial (hex) of the node's current certificate when the request renews it (the `renewal`
   * policy): the caller proved it holds that node's key, so the impersonation guard lets this Ready
   * node through. No other policy sets it.
   */
  renewalOf?: string;
  /**
   * The proof cannot tell a node's first join from anything else at its address (OpenStack: the
   * source address is the proof), so any Node of the name — Ready or not — refuses the request, as
   * kops' OpenStack verifier does (`ErrAlreadyExists`).
   */
  firstJoinOnly?: boolean;
  /** Evidence for the audit trail: account, role ARN, project, token id, approver, ... (no secrets). */
  evidence: Record<string, string>;
}

/** A policy's verdict on one request. */
export type PolicyDecision =
  | { verdict: 'approve'; facts: NodeFacts; reasons: string[] }
  | {
      verdict: 'deny';
      reasons: string[];
      /** For the operator only: written to the audit trail, never sent to the node. */
      auditDetail?: string[];
    }
  /** Hold the request for a human (the `queue` policy); `facts` are what was verified so far. */
  | { verdict: 'queue'; facts?: NodeFacts; reasons: string[] }
  | { verdict: 'abstain'; reasons: string[] };

/** What a policy may use besides the request: a clock and a logger, injected for tests. */
export interface PolicyContext {
  now(): Date;
}

/** One approval policy of the configured chain (`always-reject`, `aws`, `webhook`, ...). */
export interface BootstrapPolicy {
  /** The name used in configuration, metrics, audit records and `explain`. */
  readonly name: string;
  evaluate(request: BootstrapRequest, context: PolicyContext): Promise<PolicyDecision>;
}

/** The chain's answer: the deciding policy's verdict, plus every policy's verdict for `explain` and audit. */
export interface ChainDecision {
  decision: PolicyDecision;
  /** The policy whose verdict decided (undefined when all abstained). */
  decidedBy?: string;
  trail: { policy: string; decision: PolicyDecision }[];
}

/** A bootstrap token as stored (kubeadm format Secret `kube-system/bootstrap-token-<id>`), minus its secret. */
export interface BootstrapTokenInfo {
  id: string;
  description?: string;
  expires?: Date;
  usages: { authentication: boolean; signing: boolean };
  extraGroups: string[];
}

/**
 * Why a presented bootstrap token was refused, for the audit trail only: the node is told one vague
 * reason, so that it cannot probe which tokens exist.
 */
export interface BootstrapTokenRejection {
  rejected: string;
}

/** Validates a presented bootstrap token against the stored ones, in constant time. */
export interface BootstrapTokenValidator {
  validate(token: string, now: Date): Promise<BootstrapTokenInfo | BootstrapTokenRejection>;
}

/** One record of the audit trail: who asked, what, which policy decided, why, and what was issued. */
export interface AuditRecord {
  time: string;
  requestId: string;
  remoteAddress: string;
  claimedNodeName?: string;
  /** Set by the audit sink when redaction changed the claimed name: the SHA-256 (hex) of the name as claimed. */
  claimedNodeNameSha256?: string;
  proof: IdentityProof['kind'];
  verdict: PolicyDecision['verdict'] | 'error';
  decidedBy?: string;
  reasons: string[];
  /** What the deciding policy told only the operator (e.g. why a bootstrap token was refused). */
  detail?: string[];
  nodeName?: string;
  /** Set by the audit sink when redaction changed the node name: the SHA-256 (hex) of the name. */
  nodeNameSha256?: string;
  instanceGroup?: string;
  evidence?: Record<string, string>;
  /** Serial numbers (hex) of the certificates issued, by profile. */
  issued?: Partial<Record<ProfileName, string>>;
}
