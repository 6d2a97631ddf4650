/**
 * The callback challenge as a step of both bootstrap handlers: when the deciding policy named a
 * challenge endpoint, nothing is issued or queued until the node there answered the challenge its
 * request carried. A request without one, with a malformed one, or whose node answers wrongly is
 * refused; a node that cannot be reached is a dependency fault (503, retry with a fresh challenge).
 */

import { KopsError } from '../errors.ts';
import type { ChallengeClaim } from '../protocol/challenge.ts';
import { type CallbackChallenger, CallbackRefusedError, nodeClockReason } from './challenge-caller.ts';
import { dependencyFault, faultOfPolicy, isTransientFailure } from './dependency.ts';
import type { NodeFacts } from './types.ts';

/** The step's result: the node answered (with the evidence to audit), or why it is refused. */
export type CallbackVerdict =
  | { answered: true; evidence: Record<string, string> }
  | { answered: false; detail: string };

/**
 * Runs the challenge when `facts` call for one (no endpoint: nothing to do). `claim` decodes the
 * request's `challenge` field (undefined when absent; an input error when malformed), only when
 * needed; `policy` is the deciding policy, named by a fault.
 */
export async function callbackVerdict(
  challenger: CallbackChallenger | undefined,
  facts: NodeFacts,
  claim: () => ChallengeClaim | undefined,
  policy: string,
): Promise<CallbackVerdict> {
  const endpoint = facts.challengeEndpoint;
  if (!endpoint) return { answered: true, evidence: {} };
  if (!challenger) {
    // A policy that needs the callback on a server built without one: fail closed.
    return { answered: false, detail: 'this server has no callback challenger configured' };
  }
  let decoded: ChallengeClaim | undefined;
  try {
    decoded = claim();
  } catch (err) {
    return { answered: false, detail: (err as Error).message };
  }
  if (!decoded) return { answered: false, detail: 'the request carries no callback challenge' };
  try {
    await challenger.challenge(endpoint, decoded);
  } catch (err) {
    if (err instanceof CallbackRefusedError) return { answered: false, detail: err.message };
    // Unreachable, silent, or its clock off: no decision about the node; it retries with a fresh
    // challenge. The clock is the node's own to fix, so it is told what is wrong with it.
    if (isTransientFailure(err)) {
      const told =
        err instanceof KopsError && err.details?.['reason'] === nodeClockReason ? err.message : undefined;
      throw faultOfPolicy(policy, dependencyFault('node-callback', err, told));
    }
    throw err;
  }
  return { answered: true, evidence: { callback: `answered at ${endpoint}` } };
}
