/**
 * Evaluates the configured approval policies in order. The first policy that does not abstain
 * decides; if every policy abstains the request is denied, so an empty or misconfigured chain fails
 * closed. A policy whose dependency failed (dependency.ts) could not decide: the chain throws that
 * fault, naming the policy, and asks no later policy — the node is answered 503 and retries, so a
 * fault is never a denial and never lets another policy approve. A policy that throws anything else
 * (a bug) denies the request with its error as the reason (fail closed). The trail records every
 * verdict for `explain` and the audit trail.
 */
import { describeError } from '../errors.ts';
import { faultOfPolicy, isDependencyFault, isTransientFailure } from './dependency.ts';
import type { BootstrapPolicy, BootstrapRequest, ChainDecision, PolicyContext } from './types.ts';

/** "aws abstained: the request carries no AWS proof": what an abstaining policy said, for the denial. */
function abstention(entry: ChainDecision['trail'][number]): string {
  const reasons = entry.decision.reasons.join(', ');
  return reasons ? `${entry.policy} abstained: ${reasons}` : `${entry.policy} abstained`;
}

/** Runs `policies` on `request`; `stopAtDecision: false` evaluates every policy (for `explain`). */
export async function evaluateChain(
  policies: readonly BootstrapPolicy[],
  request: BootstrapRequest,
  context: PolicyContext,
  options: { stopAtDecision?: boolean } = {},
): Promise<ChainDecision> {
  const stopAtDecision = options.stopAtDecision ?? true;
  const trail: ChainDecision['trail'] = [];
  let decided: ChainDecision | undefined;
  for (const policy of policies) {
    let decision: ChainDecision['decision'];
    try {
      decision = await policy.evaluate(request, context);
    } catch (err) {
      if (isDependencyFault(err) || isTransientFailure(err)) throw faultOfPolicy(policy.name, err);
      decision = { verdict: 'deny', reasons: [`policy ${policy.name} failed: ${describeError(err)}`] };
    }
    trail.push({ policy: policy.name, decision });
    if (!decided && decision.verdict !== 'abstain') {
      decided = { decision, decidedBy: policy.name, trail };
      if (stopAtDecision) break;
    }
  }
  return (
    decided ?? {
      decision: {
        verdict: 'deny',
        reasons: [
          policies.length === 0
            ? 'no approval policy is configured'
            : `no policy approved the request (${trail.map(abstention).join('; ')})`,
        ],
      },
      trail,
    }
  );
}
