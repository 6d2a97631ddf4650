/**
 * The front the batched NodeIdentifiers share (GCE; the cluster server identifier of Hetzner,
 * DigitalOcean and Linode; Scaleway; OpenStack; Azure — AWS batches by instance id, behind its cache,
 * in src/cloud/aws/identify.ts): concurrent `identify` calls coalesce into one batch (batcher.ts), and
 * the strictest `maxAgeMs` any caller asked for a providerID in the window bounds the age of the
 * record its batch may answer from — so a bootstrap policy asking for a fresh read (maxAgeMs 0) is
 * never answered from a cache filled for the label controller. That holds for lookups already in
 * flight too: a lookup is keyed by its providerID and its bound, so callers with the same bound share
 * one, and a caller with another bound never gets the answer of a batch that may have served an older
 * record; its lookup goes in the next batch. The identifiers of Hetzner, DigitalOcean, Linode,
 * Scaleway, OpenStack and Azure extend {@link BatchedNodeIdentifier}; GCE's holds an
 * {@link IdentifyBatches} of its own identity type.
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
  /** Identifies one batch; `maxAges` says how old each providerID's record may be (absent: any age). */
  fetch: (providerIDs: string[], maxAges: ReadonlyMap<string, number>) => Promise<Map<string, Outcome<I>>>;
}

/** The batcher's key of a lookup: the age bound (empty for none), a space, the providerID. */
function lookupKey(providerID: string, maxAgeMs: number | undefined): string {
  return `${maxAgeMs ?? ''} ${providerID}`;
}

/** The providerID and age bound of a {@link lookupKey}. */
function parseLookupKey(key: string): { providerID: string; maxAgeMs: number | undefined } {
  const space = key.indexOf(' ');
  const bound = key.slice(0, space);
  return { providerID: key.slice(space + 1), maxAgeMs: bound === '' ? undefined : Number(bound) };
}

/** Coalesced identify calls, with the age bound each providerID was asked with. */
export class IdentifyBatches<I extends NodeIdentity = NodeIdentity> {
  readonly #batcher: Batcher<string, I>;

  constructor(options: IdentifyBatchesOptions<I>) {
    this.#batcher = new Batcher({
      windowMs: options.windowMs ?? 10,
      maxBatchSize: 10_000,
      maxConcurrent: options.maxConcurrent,
      fetch: async (keys) => {
        // One lookup per providerID, under the strictest bound its keys carry: a fresher record
        // than a caller asked for serves it as well.
        const providerIDs = new Set<string>();
        const strictest = new Map<string, number>();
        for (const key of keys) {
          const { providerID, maxAgeMs } = parseLookupKey(key);
          providerIDs.add(providerID);
          if (maxAgeMs !== undefined)
            strictest.set(providerID, Math.min(maxAgeMs, strictest.get(providerID) ?? maxAgeMs));
        }
        const outcomes = await options.fetch([...providerIDs], strictest);
        const byKey = new Map<string, Outcome<I>>();
        for (const key of keys) {
          const outcome = outcomes.get(parseLookupKey(key).providerID);
          if (outcome) byKey.set(key, outcome);
        }
        return byKey;
      },
    });
  }

  /** NodeIdentifier.identify: one outcome per providerID, from whichever batch carries it. */
  async identify(
    providerIDs: readonly string[],
    options: IdentifyOptions = {},
  ): Promise<Map<string, Identified<I>>> {
    const unique = [...new Set(providerIDs)];
    const keys = unique.map((id) => lookupKey(id, options.maxAgeMs));
    const outcomes = await this.#batcher.loadMany(keys);
    const results = new Map<string, Identified<I>>();
    unique.forEach((id, i) => {
      const outcome = outcomes.get(keys[i] as string) as Outcome<I>;
      results.set(id, outcome.ok ? { ok: true, identity: outcome.value } : outcome);
    });
    return results;
  }
}

/**
 * A NodeIdentifier over {@link IdentifyBatches}: the cloud's identifier says only how one batch is
 * identified ({@link BatchedNodeIdentifier.identifyBatch}), given each providerID's age bound.
 */
export abstract class BatchedNodeIdentifier implements NodeIdentifier {
  readonly #batches: IdentifyBatches;

  /** `windowMs` is the caller's `coalesceWindowMs`; `maxConcurrent` the batches the cloud may run at once. */
  constructor(batching: { windowMs: number | undefined; maxConcurrent: number }) {
    this.#batches = new IdentifyBatches({
      ...batching,
      fetch: (ids, maxAges) => this.identifyBatch(ids, maxAges),
    });
  }

  /** Identifies nodes by providerID; records older than `options.maxAgeMs` are read again. */
  identify(providerIDs: readonly string[], options?: IdentifyOptions): Promise<Map<string, IdentifyResult>> {
    return this.#batches.identify(providerIDs, options);
  }

  /** One outcome per providerID of the batch, each from a record no older than its `maxAges` bound. */
  protected abstract identifyBatch(
    providerIDs: string[],
    maxAges: ReadonlyMap<string, number>,
  ): Promise<Map<string, Outcome<NodeIdentity>>>;
}

/** The outcome of a check that returns its value or the error saying why there is none. */
export function outcomeOf<V>(checked: V | Error): Outcome<V> {
  return checked instanceof Error ? { ok: false, error: checked } : { ok: true, value: checked };
}
