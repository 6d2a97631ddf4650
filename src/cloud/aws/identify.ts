/**
 * Node identity on AWS: a node's providerID names an instance; EC2's record of that instance (not
 * anything the node says) decides its instance group. Lookups are batched — every identify() call
 * arriving within a short window shares DescribeInstances calls of up to 1,000 ids, a few at a time,
 * and a batch that is not full waits for the call budget, so a join storm's lookups cost a bounded
 * number of calls however they trickle in —
 * and verified identities are cached per instance id, since an instance's group never changes. Its
 * state does change: a caller deciding trust asks for a short `maxAgeMs`, so it never acts on a state
 * read longer ago than that, while labelling keeps the cache's full benefit.
 */
import { DescribeInstancesCommand, type EC2Client, type Instance } from '@aws-sdk/client-ec2';
import { ForbiddenError, InvalidInputError, NotFoundError, UnavailableError } from '../../errors.ts';
import { type Logger, RecurringFailureLog, silentLogger } from '../../log.ts';
import type { BucketLimit } from '../../runtime/token-bucket.ts';
import { Batcher, type Outcome } from '../batcher.ts';
import { LruCache } from '../lru.ts';
import type { IdentifyOptions, NodeIdentifier, NodeIdentity } from '../types.ts';
import { awsCallError, awsErrorCode } from './errors.ts';
import { type InstanceIdentity, identityFromInstance } from './instance.ts';
import { type AwsProviderID, parseAwsProviderID } from './providerid.ts';

/** How the identifier batches and caches. */
export interface AwsNodeIdentifierOptions {
  ec2: EC2Client;
  clusterName: string;
  /** How long identify() calls are collected into one batch (default 20 ms). */
  batchWindowMs?: number;
  /** Ids per DescribeInstances call (default and maximum 1,000). */
  maxBatchSize?: number;
  /** DescribeInstances calls in flight at once (default 4). */
  maxConcurrentCalls?: number;
  /** The DescribeInstances calls batches that are not full may make (default {@link defaultDescribeBudget}). */
  callBudget?: BucketLimit;
  /** Identities kept (default 100,000: enough that a 50,000-node cluster's labelling echoes hit the cache). */
  cacheSize?: number;
  /** How long a cached identity is trusted before EC2 is asked again (default 1 hour, as kops). */
  cacheTtlMs?: number;
  /** The clock the cache's ages are read from (default monotonic, see src/cloud/age.ts). */
  now?: () => number;
  logger?: Logger;
}

/** A verified identity with the instance's attached ENIs (IPAM reads the delegated IPv6 prefix there). */
export type AwsNodeIdentity = NodeIdentity & Pick<InstanceIdentity, 'networkInterfaces'>;

/** One providerID's answer: its identity, or the typed error saying why it has none. */
export type AwsIdentifyResult = { ok: true; identity: AwsNodeIdentity } | { ok: false; error: Error };

/** The most ids one DescribeInstances call takes. */
export const maxDescribeInstancesIds = 1000;

/**
 * What batches that are not full may spend of EC2's request bucket, which every caller of the
 * account's non-mutating actions shares (100 calls, refilled at 20 a second): a burst of 10, so that
 * a quiet cluster's lookups (a few joins, a controller's test of a handful of nodes) do not wait,
 * then one call every 3 s — a sixtieth of the refill — which in a storm carries every id that arrived
 * meanwhile. A full batch (1,000 ids) never waits, so a storm's calls are at most 10 + its seconds / 3
 * + one per 1,000 joins. A join waits at most those 3 s for its lookup (docs/performance.md).
 */
export const defaultDescribeBudget: BucketLimit = { burst: 10, perSecond: 1 / 3 };

const notFoundCodes = new Set(['InvalidInstanceID.NotFound', 'InvalidInstanceID.Malformed']);

/** Identifies nodes from their AWS providerIDs. */
export class AwsNodeIdentifier implements NodeIdentifier {
  readonly #ec2: EC2Client;
  readonly #clusterName: string;
  readonly #cache: LruCache<string, InstanceIdentity>;
  readonly #batcher: Batcher<string, InstanceIdentity>;
  readonly #logger: Logger;
  readonly #describeFailures: RecurringFailureLog;

  constructor(options: AwsNodeIdentifierOptions) {
    this.#ec2 = options.ec2;
    this.#clusterName = options.clusterName;
    this.#logger = options.logger ?? silentLogger;
    // Once per cause and ten minutes, not per failed call: during an EC2 outage every batch fails.
    this.#describeFailures = new RecurringFailureLog(this.#logger, {
      message: 'DescribeInstances failed',
      recoveredMessage: 'DescribeInstances answered again',
    });
    this.#cache = new LruCache({
      maxEntries: options.cacheSize ?? 100_000,
      ttlMs: options.cacheTtlMs ?? 60 * 60 * 1000,
      ...(options.now === undefined ? {} : { now: options.now }),
    });
    this.#batcher = new Batcher({
      windowMs: options.batchWindowMs ?? 20,
      maxBatchSize: Math.min(options.maxBatchSize ?? maxDescribeInstancesIds, maxDescribeInstancesIds),
      maxConcurrent: options.maxConcurrentCalls ?? 4,
      callBudget: options.callBudget ?? defaultDescribeBudget,
      fetch: (ids) => this.#fetch(ids),
    });
  }

  /**
   * Resolves providerIDs to verified identities; each failure is a typed error for that providerID.
   * A cached identity serves only while younger than `options.maxAgeMs`; a lookup of the same
   * instance already pending or in flight is shared, since its answer is being read now.
   */
  async identify(
    providerIDs: readonly string[],
    options: IdentifyOptions = {},
  ): Promise<Map<string, AwsIdentifyResult>> {
    const results = new Map<string, AwsIdentifyResult>();
    const wanted = new Map<string, AwsProviderID>();
    for (const providerID of new Set(providerIDs)) {
      let parsed: AwsProviderID;
      try {
        parsed = parseAwsProviderID(providerID);
      } catch (err) {
        results.set(providerID, { ok: false, error: err as Error });
        continue;
      }
      const cached = this.#cache.get(parsed.instanceId, options.maxAgeMs);
      if (cached) results.set(providerID, this.#result(providerID, parsed, cached));
      else wanted.set(providerID, parsed);
    }
    if (wanted.size > 0) {
      const outcomes = await this.#batcher.loadMany([...wanted.values()].map((p) => p.instanceId));
      for (const [providerID, parsed] of wanted) {
        const outcome = outcomes.get(parsed.instanceId) as Outcome<InstanceIdentity>;
        results.set(providerID, outcome.ok ? this.#result(providerID, parsed, outcome.value) : outcome);
      }
    }
    return results;
  }

  /**
   * The identity of one instance by id, read from EC2 now, for bootstrap (where no providerID, hence
   * no zone, exists yet). Never served from the cache — a terminated instance's still-valid
   * credentials must not bootstrap — but batched with concurrent lookups. Throws the typed error of a
   * refused instance.
   */
  lookupInstance(instanceId: string): Promise<InstanceIdentity> {
    return this.#batcher.load(instanceId);
  }

  /** Drops an instance's cached identity (its Node was deleted, or it is known to be gone). */
  forget(instanceId: string): void {
    this.#cache.delete(instanceId);
  }

  /** Ties an instance identity to the providerID asked for; the zone in it must be the real one. */
  #result(providerID: string, parsed: AwsProviderID, identity: InstanceIdentity): AwsIdentifyResult {
    if (parsed.zone !== identity.zone) {
      return {
        ok: false,
        error: new ForbiddenError(
          `providerID ${providerID} names zone ${parsed.zone}, but instance ${parsed.instanceId} is in ${identity.zone}; ` +
            'the providerID does not describe this instance',
          { details: { instanceId: parsed.instanceId, reason: 'zone-mismatch' } },
        ),
      };
    }
    return { ok: true, identity: { ...identity, providerID } };
  }

  async #fetch(ids: string[]): Promise<Map<string, Outcome<InstanceIdentity>>> {
    const started = performance.now();
    const found = await this.#describe(ids);
    const outcomes = new Map<string, Outcome<InstanceIdentity>>();
    for (const [id, entry] of found) {
      if (!entry.ok) {
        this.#cache.delete(id);
        outcomes.set(id, entry);
        continue;
      }
      try {
        const identity = identityFromInstance(entry.value, this.#clusterName);
        this.#cache.set(id, identity);
        outcomes.set(id, { ok: true, value: identity });
      } catch (err) {
        this.#cache.delete(id);
        outcomes.set(id, { ok: false, error: err as Error });
      }
    }
    this.#logger.debug(
      { ids: ids.length, ms: Math.round(performance.now() - started) },
      'described EC2 instances',
    );
    return outcomes;
  }

  /**
   * DescribeInstances for a batch. EC2 fails a whole call when one id does not exist; the ids its
   * error names are set aside and the rest asked again, and when the error names none the batch is
   * halved until the bad ids are isolated — one bad id never fails the others.
   */
  async #describe(ids: readonly string[]): Promise<Map<string, Outcome<Instance>>> {
    const outcomes = new Map<string, Outcome<Instance>>();
    try {
      const instances = await this.#describeInstances(ids);
      this.#describeFailures.succeeded();
      for (const id of ids) {
        const instance = instances.get(id);
        outcomes.set(
          id,
          instance instanceof Error
            ? { ok: false, error: instance }
            : instance
              ? { ok: true, value: instance }
              : { ok: false, error: missing(id) },
        );
      }
      return outcomes;
    } catch (err) {
      const code = awsErrorCode(err);
      if (code === undefined || !notFoundCodes.has(code)) {
        const error = awsCallError(err, 'ec2:DescribeInstances', 'ec2:DescribeInstances');
        this.#describeFailures.failed(error, { ids: ids.length });
        for (const id of ids) outcomes.set(id, { ok: false, error });
        return outcomes;
      }
      const named = new Set((err as Error).message.match(/i-[0-9a-zA-Z]+/g) ?? []);
      const bad = ids.filter((id) => named.has(id));
      if (bad.length === 0 && ids.length === 1) bad.push(ids[0] as string);
      for (const id of bad) outcomes.set(id, { ok: false, error: badIdError(id, code) });
      const rest = ids.filter((id) => !outcomes.has(id));
      for (const part of retryParts(rest, bad.length > 0)) {
        for (const [id, outcome] of await this.#describe(part)) outcomes.set(id, outcome);
      }
      return outcomes;
    }
  }

  /**
   * One DescribeInstances call (following NextToken, should EC2 page), instances by id. A NextToken
   * already followed, or more pages than ids, is a broken answer (the call fails unavailable rather
   * than loop); an instance listed twice with different records is answered by neither.
   */
  async #describeInstances(ids: readonly string[]): Promise<Map<string, Instance | Error>> {
    const byId = new Map<string, Instance | Error>();
    // The first record listed of each id; compared only when the id comes again (rarely), so the
    // common page costs no serialisation.
    const seen = new Map<string, Instance>();
    const tokens = new Set<string>();
    let nextToken: string | undefined;
    for (let pages = 1; ; pages++) {
      const page = await this.#ec2.send(
        new DescribeInstancesCommand({
          InstanceIds: [...ids],
          ...(nextToken ? { NextToken: nextToken } : {}),
        }),
      );
      for (const reservation of page.Reservations ?? []) {
        for (const instance of reservation.Instances ?? []) {
          const id = instance.InstanceId;
          if (!id) continue;
          const before = seen.get(id);
          if (before === undefined) {
            seen.set(id, instance);
            byId.set(id, instance);
          } else if (JSON.stringify(before) !== JSON.stringify(instance)) {
            this.#logger.warn(
              { instanceId: id },
              'DescribeInstances listed one instance twice with different records',
            );
            byId.set(
              id,
              new UnavailableError(
                `EC2 listed instance ${id} twice with different records (tags or state); it is not identified until EC2 agrees with itself`,
                { details: { instanceId: id, reason: 'malformed-answer' } },
              ),
            );
          }
        }
      }
      nextToken = page.NextToken;
      if (!nextToken) return byId;
      if (tokens.has(nextToken) || pages > ids.length) {
        throw new UnavailableError(
          `EC2 DescribeInstances answered ${tokens.has(nextToken) ? 'a NextToken it had already answered' : `more pages than the ${ids.length} ids asked for`}; the call is abandoned`,
          { details: { reason: 'malformed-answer' } },
        );
      }
      tokens.add(nextToken);
    }
  }
}

/** Why EC2 refused an id it named: a malformed id is bad input; any other named id does not exist. */
function badIdError(instanceId: string, code: string): Error {
  if (code === 'InvalidInstanceID.Malformed') {
    return new InvalidInputError(`EC2 says instance id ${instanceId} is malformed`);
  }
  return missing(instanceId);
}

/**
 * The ids to ask for again after a not-found error: all at once when the bad ids were set aside,
 * otherwise in two halves, so that repeated halving isolates ids the error did not name.
 */
function retryParts(rest: string[], badIdsSetAside: boolean): string[][] {
  if (rest.length === 0) return [];
  if (badIdsSetAside) return [rest];
  const middle = Math.ceil(rest.length / 2);
  return [rest.slice(0, middle), rest.slice(middle)];
}

function missing(instanceId: string): NotFoundError {
  return new NotFoundError(
    `EC2 has no instance ${instanceId}; the node's providerID names an instance that does not exist`,
    {
      details: { instanceId },
    },
  );
}
