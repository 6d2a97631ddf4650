/**
 * `bootstrap-token`: approves the claimed node name when the request carries a valid kubeadm-format
 * bootstrap token with the `authentication` usage.
 *
 * Threat model: a bootstrap token is a shared secret, not a node identity. Whoever holds one can claim
 * ANY node name that is not already a Ready node (the server refuses those), until the token expires
 * or is deleted. Keep tokens short-lived, one per batch of machines, and narrow the names they may
 * claim with `nodeNamePattern`. The token id (never the secret) is recorded as evidence.
 *
 * Cost of guessing: a malformed token is refused here, and the controller's validator refuses an
 * unknown id or a wrong secret from its watch of the token Secrets, so neither reaches the API
 * server (see WatchedTokenSecrets in ../tokens.ts).
 */
import { validateDnsName } from '../../pki/profiles.ts';
import { parseToken } from '../../protocol/bootstrap-token.ts';
import { dependencyFault, isTransientFailure } from '../dependency.ts';
import type { BootstrapPolicy, BootstrapTokenValidator, PolicyDecision } from '../types.ts';

/** Options of the `bootstrap-token` policy. */
export interface BootstrapTokenPolicyOptions {
  validator: BootstrapTokenValidator;
  /** When set, the claimed node name must match it in full (e.g. `^worker-[0-9]+$`). */
  nodeNamePattern?: RegExp;
}

/** The public id part of a `<id>.<secret>` token, or undefined when it is not of that shape. */
export function bootstrapTokenId(token: string): string | undefined {
  return parseToken(token)?.id;
}

/**
 * Checks a presented token: well-formed, known, unexpired, right secret, and allowed for
 * authentication. Returns its id, or the denial: one vague reason for the node and, for the audit
 * trail, the validator's precise one (neither ever contains the secret).
 */
export async function checkBootstrapToken(
  validator: BootstrapTokenValidator,
  token: string,
  now: Date,
): Promise<{ tokenId: string } | Extract<PolicyDecision, { verdict: 'deny' }>> {
  const deny = (reason: string, detail?: string) => ({
    verdict: 'deny' as const,
    reasons: [reason],
    ...(detail ? { auditDetail: [detail] } : {}),
  });
  const tokenId = bootstrapTokenId(token);
  if (tokenId === undefined) {
    return deny('the bootstrap token is malformed: expected <6 chars [a-z0-9]>.<16 chars [a-z0-9]>');
  }
  let info: Awaited<ReturnType<BootstrapTokenValidator['validate']>>;
  try {
    info = await validator.validate(token, now);
  } catch (err) {
    // The token Secret could not be read: the API server's fault, not a verdict on the token.
    throw isTransientFailure(err) ? dependencyFault('kubernetes-api', err) : err;
  }
  if ('rejected' in info) {
    return deny(`bootstrap token ${tokenId} is unknown, expired or its secret is wrong`, info.rejected);
  }
  if (!info.usages.authentication) {
    return deny(`bootstrap token ${tokenId} lacks the usage-bootstrap-authentication usage`);
  }
  return { tokenId };
}

/** Approves the claimed name for a valid authentication token; abstains when the request has no token. */
export function bootstrapTokenPolicy(options: BootstrapTokenPolicyOptions): BootstrapPolicy {
  const { validator, nodeNamePattern } = options;
  return {
    name: 'bootstrap-token',
    evaluate: async (request, context) => {
      if (request.proof.kind !== 'bootstrap-token') {
        return { verdict: 'abstain', reasons: ['the request carries no bootstrap token'] };
      }
      const checked = await checkBootstrapToken(validator, request.proof.token, context.now());
      if ('verdict' in checked) return checked;
      const { tokenId } = checked;
      const nodeName = request.claimedNodeName;
      if (!nodeName) return { verdict: 'deny', reasons: ['the request names no node'] };
      try {
        validateDnsName(nodeName, 'node name');
      } catch (err) {
        return { verdict: 'deny', reasons: [(err as Error).message] };
      }
      if (nodeNamePattern && !fullMatch(nodeNamePattern, nodeName)) {
        return {
          verdict: 'deny',
          reasons: [
            `node name ${nodeName} does not match ${nodeNamePattern.source}, the names bootstrap tokens may claim`,
          ],
        };
      }
      return {
        verdict: 'approve',
        facts: { nodeName, dnsNames: [], ipAddresses: [], evidence: { tokenId } },
        reasons: [`bootstrap token ${tokenId} is valid for authentication; node name ${nodeName} as claimed`],
      };
    },
  };
}

/** Whether `pattern` matches all of `value`, whether or not the pattern is anchored. */
export function fullMatch(pattern: RegExp, value: string): boolean {
  return new RegExp(`^(?:${pattern.source})$`, pattern.flags.replace(/[gy]/g, '')).test(value);
}
