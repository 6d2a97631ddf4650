/**
 * The front the batched NodeIdentifiers share (GCE; the cluster server identifier of Hetzner,
 * DigitalOcean and Linode; Scaleway; OpenStack; Azure — AWS batches by instance id, behind its cache,
 * in src/cloud/aws/identify.ts): concurrent `identify` calls coalesce into one batch (batcher.ts), and
 * the strictest `maxAgeMs` any caller asked for a providerID in the window bounds the age of the
 * record its batch may answer from — so a bootstrap policy asking for a fresh read (maxAgeMs 0) is
 * never answered from a cache filled for the label controller.
 */
import { Batcher, type Outcome } from './batcher.ts';
import type { IdentifyOptions, NodeIdentity } from './types.ts';

/** One providerID's answer: an identity of the identifier's own type, or why there is none. */
export type Identified<I extends NodeIdentity> = { ok: true; identity: I } | { ok: false; error: Error };

/** Options of {@link IdentifyBatches}. */
export interface IdentifyBatchesOptions<I extends NodeIdentity = NodeIdentity> {
  /** Calls within this window share one batch (the identifiers' default: 10 ms). */
  windowMs?: number | undefined;
  /** Batches in flight at once. */
  maxConcurrent: number;
  /** Identifies one batch; {@link IdentifyBatches.takeMaxAge} says how old each record may be. */
  fetch: (providerIDs: string[]) => Promise<Map<string, Outcome<I>>>;
}

/** Coalesced identify calls, with the age bound each providerID was asked with. */
export class IdentifyBatches<I extends NodeIdentity = NodeIdentity> {
  readonly #batcher: Batcher<string, I>;
  /** The strictest `maxAgeMs` asked for each providerID not yet batched. */
  readonly #maxAgeMs = new Map<string, number>();

  constructor(options: IdentifyBatchesOptions<I>) {
    this.#batcher = new Batcher({
      windowMs: options.windowMs ?? 10,
      maxBatchSize: 10_000,
      maxConcurrent: options.maxConcurrent,
      fetch: options.fetch,
    });
  }

  /** NodeIdentifier.identify: one outcome per providerID, from whichever batch carries it. */
  async identify(
    providerIDs: readonly string[],
    options: IdentifyOptions = {},
  ): Promise<Map<string, Identified<I>>> {
    const { maxAgeMs } = options;
    if (maxAgeMs !== undefined) {
      for (const id of providerIDs)
        this.#maxAgeMs.set(id, Math.min(maxAgeMs, this.#maxAgeMs.get(id) ?? maxAgeMs));
    }
    const results = new Map<string, Identified<I>>();
    for (const [id, outcome] of await this.#batcher.loadMany(providerIDs)) {
      results.set(id, outcome.ok ? { ok: true, identity: outcome.value } : outcome);
    }
    return results;
  }

  /** The age bound asked for `providerID` (undefined: any cached record will do), now spent. */
  takeMaxAge(providerID: string): number | undefined {
    const maxAgeMs = this.#maxAgeMs.get(providerID);
    this.#maxAgeMs.delete(providerID);
    return maxAgeMs;
  }
}
