/**
 * The front the batched NodeIdentifiers share (GCE; the cluster server identifier of Hetzner,
 * DigitalOcean and Linode; Scaleway; OpenStack; Azure — AWS batches by instance id, behind its cache,
 * in src/cloud/aws/identify.ts): concurrent `identify` calls coalesce into one batch (batcher.ts), and
 * the strictest `maxAgeMs` any caller asked for a providerID in the window bounds the age of the
 * record its batch may answer from — so a bootstrap policy asking for a fresh read (maxAgeMs 0) is
 * never answered from a cache filled for the label controller. The identifiers of Hetzner,
 * DigitalOcean, Linode, Scaleway, OpenStack and Azure extend {@link BatchedNodeIdentifier}; GCE's
 * holds an {@link IdentifyBatches} of its own identity type.
 */
import { Batcher, type Outcome } from './batcher.ts';
import type { IdentifyOptions, IdentifyResult, NodeIdentifier, NodeIdentity } from './types.ts';

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

/**
 * A NodeIdentifier over {@link IdentifyBatches}: the cloud's identifier says only how one batch is
 * identified ({@link BatchedNodeIdentifier.identifyBatch}), reading each providerID's age bound with
 * {@link BatchedNodeIdentifier.takeMaxAge}.
 */
export abstract class BatchedNodeIdentifier implements NodeIdentifier {
  readonly #batches: IdentifyBatches;

  /** `windowMs` is the caller's `coalesceWindowMs`; `maxConcurrent` the batches the cloud may run at once. */
  constructor(batching: { windowMs: number | undefined; maxConcurrent: number }) {
    this.#batches = new IdentifyBatches({ ...batching, fetch: (ids) => this.identifyBatch(ids) });
  }

  /** Identifies nodes by providerID; records older than `options.maxAgeMs` are read again. */
  identify(providerIDs: readonly string[], options?: IdentifyOptions): Promise<Map<string, IdentifyResult>> {
    return this.#batches.identify(providerIDs, options);
  }

  /** The age bound asked for `providerID` (undefined: any cached record will do), now spent. */
  protected takeMaxAge(providerID: string): number | undefined {
    return this.#batches.takeMaxAge(providerID);
  }

  /** One outcome per providerID of the batch. */
  protected abstract identifyBatch(providerIDs: string[]): Promise<Map<string, Outcome<NodeIdentity>>>;
}

/** The outcome of a check that returns its value or the error saying why there is none. */
export function outcomeOf<V>(checked: V | Error): Outcome<V> {
  return checked instanceof Error ? { ok: false, error: checked } : { ok: true, value: checked };
}
