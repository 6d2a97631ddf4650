/**
 * `queue`: holds the request for a human. The bootstrap server turns a `queue` verdict into a pending
 * CertificateSigningRequest an admin approves or denies; the facts it carries are the verified ones
 * when a policy verified some (e.g. `metal` found the host), else only the unverified claimed name,
 * and the reasons say which, so the approver knows what they vouch for.
 */
import type { BootstrapPolicy, BootstrapRequest, NodeFacts, PolicyDecision } from '../types.ts';

/** The `queue` verdict for a request: `verified` facts when a policy established them, else the claim. */
export function queueDecision(request: BootstrapRequest, verified?: NodeFacts): PolicyDecision {
  if (verified) {
    return {
      verdict: 'queue',
      facts: verified,
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

/** A policy that queues every request for a human. */
export function queuePolicy(): BootstrapPolicy {
  return { name: 'queue', evaluate: async (request) => queueDecision(request) };
}
