/**
 * `queue`: holds the request for a human. The bootstrap server turns a `queue` verdict into a pending
 * CertificateSigningRequest an admin approves or denies; the facts it carries are the verified ones
 * when a policy verified some (e.g. `metal` found the host), else only the unverified claimed name,
 * and the reasons say which, so the approver knows what they vouch for.
 *
 * Whether the facts were verified is recorded positively, as `evidence.verified: "true"`, set here
 * and only here, on facts a policy handed over as verified; anything else (absent, `"false"`) reads
 * as claimed. Nothing a requester sends can reach that evidence.
 */
import type { BootstrapPolicy, BootstrapRequest, NodeFacts, PolicyDecision } from '../types.ts';

/** The `queue` verdict for a request: `verified` facts when a policy established them, else the claim. */
export function queueDecision(request: BootstrapRequest, verified?: NodeFacts): PolicyDecision {
  if (verified) {
    return {
      verdict: 'queue',
      facts: { ...verified, evidence: { ...verified.evidence, verified: 'true' } },
      reasons: [`node ${verified.nodeName} is verified; waiting for a human to approve it`],
    };
  }
  const claimed = request.claimedNodeName;
  if (!claimed) {
    return { verdict: 'queue', reasons: ['the request names no node; a human must decide who it is'] };
  }
  return {
    verdict: 'queue',
    facts: { nodeName: claimed, dnsNames: [], ipAddresses: [], evidence: { verified: 'false' } },
    reasons: [
      `the node name ${claimed} is claimed, not verified: a human must check that ` +
        `${request.remoteAddress} really is ${claimed} before approving`,
    ],
  };
}

/** Whether a queued request's node name was verified by a policy (see the module comment). */
export function nameIsVerified(facts: Pick<NodeFacts, 'evidence'> | undefined): boolean {
  return facts?.evidence?.['verified'] === 'true';
}

/**
 * Whether its addresses were verified too: not when the serving request supplied them (the server
 * marks those `evidence.addresses`, for the approver to check).
 */
export function addressesAreVerified(facts: Pick<NodeFacts, 'evidence'> | undefined): boolean {
  return nameIsVerified(facts) && facts?.evidence?.['addresses'] === undefined;
}

/** A policy that queues every request for a human. */
export function queuePolicy(): BootstrapPolicy {
  return { name: 'queue', evaluate: async (request) => queueDecision(request) };
}
