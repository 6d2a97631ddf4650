/**
 * What unauthenticated id-only proofs may cost the cloud's API quota. On Hetzner, DigitalOcean and
 * Linode a proof is a bare server id (the callback challenge, not the proof, shows the caller is
 * that server), so anyone who reaches the bootstrap port can make the controller look up any id, each
 * read taken from a project quota the cloud controller manager, the autoscaler and kops share
 * (Hetzner: 3,600 an hour; a few requests a second from one address drained it,
 * tmp/redteam/04-hetzner-quota-drain.ts).
 *
 * Every read by id a proof causes takes a token first, whatever it finds (a join, a refusal, a
 * throttled answer): 30 at once, then one every 20 s. With the bucket empty, proofs are answered from
 * a list of the cluster instead (`ClusterServerIdentifier.identifyListed`): one list serves every
 * proof, listed again at most every 15 s (4 s a page on large clusters), so however many proofs
 * arrive, from however many sources, the cloud sees at most the bucket's refill and one paced list —
 * and a live server of ours is still found, in the next list, so nobody can hold back joins by
 * spending the bucket. A refusal of who the server is (another cluster's, no instance group) is
 * remembered for a minute, so a misconfigured machine retrying with its id costs one read a minute;
 * a refusal that may change (not found, not running yet) is not remembered: anyone can name the next
 * server's id, and a remembered refusal would be the answer to its own join.
 */

import { LruCache } from '../cloud/lru.ts';
import { KopsError } from '../errors.ts';
import { type BucketLimit, TokenBucket } from '../runtime/token-bucket.ts';

/** Reads by id that proofs may cause: 30 at once, then one every 20 s (180 an hour). */
export const defaultLookupBudget: BucketLimit = { burst: 30, perSecond: 1 / 20 };

/** How long a refusal of who a server is answers again (a server may be relabelled meanwhile). */
export const rememberedRefusalTtlMs = 60_000;

/** The refusals that say who the server is, which a minute does not change. */
const lastingReasons = new Set(['foreign-cluster', 'no-instance-group', 'invalid-instance-group']);

/** Refused ids remembered at most. */
const maxRememberedIds = 10_000;

/** The budget of one verifier (one per process: serving workers each have their own). */
export class LookupBudget {
  readonly #bucket: TokenBucket;
  readonly #now: () => number;
  readonly #refused: LruCache<string, Error>;

  constructor(options: { limit?: BucketLimit; now?: () => number } = {}) {
    this.#now = options.now ?? (() => performance.now());
    this.#bucket = new TokenBucket(options.limit ?? defaultLookupBudget, this.#now());
    this.#refused = new LruCache({
      maxEntries: maxRememberedIds,
      ttlMs: rememberedRefusalTtlMs,
      now: this.#now,
    });
  }

  /** The refusal remembered for `id`, to be answered again without a read. */
  remembered(id: string): Error | undefined {
    return this.#refused.get(id);
  }

  /** Whether a read by id may go ahead now (its token taken); false: answer from a list instead. */
  tryRead(): boolean {
    return this.#bucket.tryTake(this.#now());
  }

  /** The cloud refused `id`: remembered when the refusal says who the server is. */
  refused(id: string, error: Error): void {
    if (error instanceof KopsError && lastingReasons.has(String(error.details?.['reason'] ?? ''))) {
      this.#refused.set(id, error);
    }
  }
}
