/** `always-reject`: denies every request — the seed's stock policy for a cluster that admits no new nodes. */
import type { BootstrapPolicy } from '../types.ts';

/** A policy that denies everything, saying that the cluster admits no new nodes. */
export function alwaysRejectPolicy(): BootstrapPolicy {
  return {
    name: 'always-reject',
    evaluate: async () => ({
      verdict: 'deny',
      reasons: ['this cluster admits no new nodes (policy always-reject)'],
    }),
  };
}
