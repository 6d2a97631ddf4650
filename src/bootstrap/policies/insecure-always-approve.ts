/**
 * `insecure-always-approve`: approves any request for the node name it claims. Anyone who can reach
 * the bootstrap port gets a node identity of their choosing, so it exists only for throwaway clusters
 * and benchmarks; the server logs {@link startupWarning} loudly, and the evidence of every approval
 * says `insecure: true`.
 */
import type { BootstrapPolicy } from '../types.ts';

/** The warning the server logs at start-up when this policy is configured. */
export function startupWarning(): string {
  return (
    'INSECURE: approval policy insecure-always-approve is configured — anyone who can reach the ' +
    'bootstrap port can obtain a node certificate for any node name. Never use it outside a test cluster.'
  );
}

/** Approves the claimed node name, with no SANs beyond the name itself; denies a request that claims none. */
export function insecureAlwaysApprovePolicy(): BootstrapPolicy {
  return {
    name: 'insecure-always-approve',
    evaluate: async (request) => {
      const nodeName = request.claimedNodeName;
      if (!nodeName) return { verdict: 'deny', reasons: ['the request names no node to approve'] };
      return {
        verdict: 'approve',
        facts: { nodeName, dnsNames: [], ipAddresses: [], evidence: { insecure: 'true' } },
        reasons: [`approved the claimed name ${nodeName} without verification (insecure-always-approve)`],
      };
    },
  };
}
