/**
 * The checks the id-only callback clouds' policy tests share (hetzner, digitalocean, linode): every
 * other proof is abstained on, each bad proof is denied with its reason, and each fault of the cloud
 * API is a dependency fault (503) naming the cloud's dependency, never a verdict.
 */
import assert from 'node:assert/strict';
import { type Dependency, dependencyOf, isDependencyFault } from '../dependency.ts';
import type { CloudIdScheme, IdentityProof, PolicyDecision } from '../types.ts';

/** A policy under test, asked about one proof. */
export type EvaluateProof = (proof: IdentityProof) => Promise<PolicyDecision>;

/** The `scheme` proof naming `token`. */
export function cloudIdProof(scheme: CloudIdScheme, token: string): IdentityProof {
  return { kind: 'cloud-id', scheme, token };
}

/** No proof, and the other callback clouds' proofs, are left to other policies. */
export async function assertAbstainsOnOtherProofs(
  evaluate: EvaluateProof,
  own: CloudIdScheme,
): Promise<void> {
  const others: CloudIdScheme[] = ['x-hetzner-id', 'x-digitalocean-droplet-id', 'x-linode-instance-id'];
  const proofs: IdentityProof[] = [
    { kind: 'none' },
    { kind: 'bootstrap-token', token: 'abcdef.0123456789abcdef' },
    ...others.filter((scheme) => scheme !== own).map((scheme) => cloudIdProof(scheme, '1')),
  ];
  for (const proof of proofs) assert.equal((await evaluate(proof)).verdict, 'abstain', JSON.stringify(proof));
}

/** Each `[what, token, reason]` is denied with a reason matching `reason`. */
export async function assertDenials(
  evaluate: EvaluateProof,
  scheme: CloudIdScheme,
  cases: ReadonlyArray<[string, string, RegExp]>,
): Promise<void> {
  for (const [what, token, reason] of cases) {
    const decision = await evaluate(cloudIdProof(scheme, token));
    assert.equal(decision.verdict, 'deny', what);
    assert.match(decision.reasons.join(' '), reason, what);
  }
}

/** Each fault, injected on its own, makes the evaluation a dependency fault of `dependency`. */
export async function assertDependencyFaults<F>(
  evaluate: () => Promise<PolicyDecision>,
  faults: readonly F[],
  inject: (fault: F) => void,
  dependency: Dependency,
): Promise<void> {
  for (const fault of faults) {
    inject(fault);
    const failure = await evaluate().then(
      (decision) => assert.fail(`${JSON.stringify(fault)} decided ${decision.verdict}`),
      (err: unknown) => err,
    );
    assert.ok(isDependencyFault(failure), `${JSON.stringify(fault)}: ${String(failure)}`);
    assert.equal(dependencyOf(failure), dependency);
  }
}
