/**
 * What unauthenticated id-only proofs may cost the cloud's API quota. On Hetzner, DigitalOcean,
 * Linode, Scaleway and OpenStack a proof is a bare server id (the callback challenge, not the proof,
 * shows the caller is that server), so anyone who reaches the bootstrap port can make the controller
 * read the cloud's record of any id, each read taken from a project quota the cloud controller
 * manager, the autoscaler and kops share (Hetzner: 3,600 an hour; a few requests a second from one
 * address drained it, tmp/redteam/04-hetzner-quota-drain.ts).
 *
 * Joins are reads of live servers of ours and cost nothing here. Each refusal the cloud's answer
 * leads to (an id that does not exist, another cluster's server, a stopped one, a request from
 * another address than the server's) takes a token from one bucket shared by every source. A refusal
 * of the server itself (another cluster's, stopped) is also remembered for a minute, so a
 * misconfigured machine retrying with its id costs one read a minute; an id that does not exist is
 * not (the server may be created, and ids are guessable: a remembered "not found" would let anyone
 * hold back the next servers' joins). Once the bucket is empty, id-only proofs are answered `503`
 * with Retry-After before any cloud call until it refills: a flood of made-up ids then costs the
 * project at most the bucket's refill, at the price of joins waiting meanwhile (they retry), which
 * the operator sees (`kops_controller_bootstrap_requests_total{verdict="error"}` and the log line).
 */

import { LruCache } from '../cloud/lru.ts';
import { NotFoundError, RateLimitedError } from '../errors.ts';
import { type BucketLimit, TokenBucket } from '../runtime/token-bucket.ts';

/** Refusals the cloud's answers may lead to: 30 at once, then one every 20 s (180 an hour). */
export const defaultRefusalBudget: BucketLimit = { burst: 30, perSecond: 1 / 20 };

/** How long a refused id is answered from memory (a server may start, or be created, meanwhile). */
export const refusedIdTtlMs = 60_000;

/** Refused ids remembered at most. */
const maxRememberedIds = 10_000;

/** The budget of one verifier (one per process: serving workers each have their own). */
export class RefusalBudget {
  readonly #bucket: TokenBucket;
  readonly #now: () => number;
  readonly #refused: LruCache<string, Error>;

  constructor(options: { limit?: BucketLimit; now?: () => number } = {}) {
    this.#now = options.now ?? (() => performance.now());
    this.#bucket = new TokenBucket(options.limit ?? defaultRefusalBudget, this.#now());
    this.#refused = new LruCache({ maxEntries: maxRememberedIds, ttlMs: refusedIdTtlMs, now: this.#now });
  }

  /**
   * Before a cloud read for `id`: the refusal remembered for it (returned, to be answered again), or
   * RateLimitedError when refusals have used up the budget; undefined when the read may go ahead.
   */
  before(id: string, what: string): Error | undefined {
    const refused = this.#refused.get(id);
    if (refused) return refused;
    const waitMs = this.#bucket.msUntilToken(this.#now());
    if (waitMs > 0) {
      return new RateLimitedError(
        `too many ${what} proofs named servers the cloud refused; cloud reads for them resume in ${Math.ceil(waitMs / 1000)} s`,
        { retryAfterSeconds: Math.ceil(waitMs / 1000), details: { reason: 'refusal-budget' } },
      );
    }
    return undefined;
  }

  /**
   * After the cloud's answer led to refusing `id`: a token taken, and the refusal remembered when
   * `remember` (by default, unless the server was not found).
   */
  refused(id: string, error: Error, remember = !(error instanceof NotFoundError)): void {
    if (remember) this.#refused.set(id, error);
    this.#bucket.tryTake(this.#now());
  }
}
