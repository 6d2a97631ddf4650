/**
 * OpenStack node identity: providerID → Nova server → its `KubernetesCluster` and `KopsInstanceGroup`
 * metadata, as kops' identifier and verifier read them (kops calls `servers.Get` once per node).
 *
 * Batched and cached, because kops' one call per node does not scale: concurrent `identify` calls
 * within a short window share one batch (batcher.ts); a batch of a few servers reads each with
 * `GET /servers/{id}`, a larger one lists the project's servers (`GET /servers/detail`, 1,000 a
 * page), and that listing is kept as a snapshot for `snapshotTtlMs` so the next batches of a label
 * storm cost nothing. A server missing from a snapshot older than the caller allows, or from a
 * cached one (it may be new), makes one fresh listing, shared by every batch waiting for it.
 * Only servers of the controller's own project are identified: the listing holds no other (Nova
 * scopes it to the token's project), and a server read by id that Nova shows from another project,
 * as it does to an admin token, is refused by NovaClient (reason `foreign-cluster`, final).
 *
 * Rate limits: Nova itself enforces none on its API (its `GET /limits` reports an empty `rate`
 * list, https://docs.openstack.org/api-ref/compute/#show-rate-and-absolute-limits; rate limiting was
 * removed from Nova's API pipeline); clouds that limit do it in front of it, answering 429 with
 * Retry-After, which NovaClient honours. At 5,000 nodes a storm costs 5 listing pages per snapshot
 * lifetime instead of 5,000 reads.
 */
import { NotFoundError } from '../../errors.ts';
import { type Logger, silentLogger } from '../../log.ts';
import { monotonicMs, youngerThan } from '../age.ts';
import type { Outcome } from '../batcher.ts';
import { listingFault } from '../cluster-servers.ts';
import { mapConcurrent } from '../concurrency.ts';
import { BatchedNodeIdentifier, outcomeOf } from '../identify-batches.ts';
import type { NodeIdentity } from '../types.ts';
import type { NovaClient, NovaServer } from './nova.ts';
import { identityOfServer, parseOpenStackProviderID } from './server.ts';

/** Options of {@link OpenStackNodeIdentifier}. */
export interface OpenStackNodeIdentifierOptions {
  nova: Pick<NovaClient, 'getServer' | 'listServers'>;
  /** Our kops cluster: servers whose metadata names another are not our nodes. */
  clusterName: string;
  logger?: Logger;
  /** Batches of this many servers or fewer read each one (default 3); larger ones list. */
  getThreshold?: number;
  /** How long a listing answers later batches (default 30 s). */
  snapshotTtlMs?: number;
  /** Calls to `identify` within this window share one batch (default 10 ms). */
  coalesceWindowMs?: number;
  /** Parallel `servers.get` calls at most (default 8). */
  concurrency?: number;
  /** The clock the snapshot's age is read from (default monotonic: {@link monotonicMs}). */
  now?: () => number;
}

interface Snapshot {
  at: number;
  servers: Map<string, NovaServer>;
}

/** Resolves `openstack://` providerIDs to kops instance groups through Nova. */
export class OpenStackNodeIdentifier extends BatchedNodeIdentifier {
  readonly #options: OpenStackNodeIdentifierOptions;
  readonly #logger: Logger;
  readonly #now: () => number;
  #snapshot: Snapshot | undefined;
  #listing: Promise<Snapshot> | undefined;

  constructor(options: OpenStackNodeIdentifierOptions) {
    super({ windowMs: options.coalesceWindowMs, maxConcurrent: 2 });
    this.#options = options;
    this.#logger = options.logger ?? silentLogger;
    this.#now = options.now ?? monotonicMs;
  }

  protected async identifyBatch(
    providerIDs: string[],
    maxAges: ReadonlyMap<string, number>,
  ): Promise<Map<string, Outcome<NodeIdentity>>> {
    let maxAgeMs = this.#options.snapshotTtlMs ?? 30_000;
    for (const id of providerIDs) {
      maxAgeMs = Math.min(maxAgeMs, maxAges.get(id) ?? maxAgeMs);
    }
    const results = new Map<string, Outcome<NodeIdentity>>();
    const serverIds = new Map<string, string>();
    for (const providerID of providerIDs) {
      try {
        serverIds.set(providerID, parseOpenStackProviderID(providerID));
      } catch (err) {
        results.set(providerID, { ok: false, error: err as Error });
      }
    }
    const found = await this.#servers([...new Set(serverIds.values())], maxAgeMs);
    for (const [providerID, serverId] of serverIds) {
      const server = found.get(serverId) ?? new NotFoundError(`server ${serverId} not found in the project`);
      results.set(
        providerID,
        outcomeOf(
          server instanceof Error ? server : identityOfServer(providerID, server, this.#options.clusterName),
        ),
      );
    }
    this.#logger.debug({ nodes: providerIDs.length }, 'identified OpenStack nodes');
    return results;
  }

  /** The servers asked for, from a snapshot young enough, single reads, or a new listing. */
  async #servers(ids: string[], maxAgeMs: number): Promise<Map<string, NovaServer | Error>> {
    const out = new Map<string, NovaServer | Error>();
    const snapshot = this.#snapshot;
    const fresh = snapshot && youngerThan(snapshot.at, this.#now(), maxAgeMs) ? snapshot : undefined;
    const missing = fresh ? ids.filter((id) => !fresh.servers.has(id)) : ids;
    for (const id of ids) {
      const server = fresh?.servers.get(id);
      if (server) out.set(id, server);
    }
    if (missing.length === 0) return out;
    if (missing.length <= (this.#options.getThreshold ?? 3)) {
      await mapConcurrent(missing, this.#options.concurrency ?? 8, async (id) => {
        out.set(id, await this.#options.nova.getServer(id).catch((err: Error) => err));
      });
      return out;
    }
    try {
      const listed = await this.#list(fresh);
      for (const id of missing) {
        out.set(id, listed.servers.get(id) ?? new NotFoundError(`server ${id} not found in the project`));
      }
    } catch (err) {
      const fault = listingFault(err as Error, 'server');
      for (const id of missing) out.set(id, fault);
    }
    return out;
  }

  /** A listing newer than `stale` (or any new one): the one in flight, one made since, or a new one. */
  #list(stale: Snapshot | undefined): Promise<Snapshot> {
    const since = this.#snapshot;
    if (!this.#listing && stale && since && since.at > stale.at) return Promise.resolve(since);
    this.#listing ??= (async () => {
      const at = this.#now();
      const servers = await this.#options.nova.listServers();
      this.#snapshot = { at, servers: new Map(servers.map((s) => [s.id, s])) };
      return this.#snapshot;
    })().finally(() => {
      this.#listing = undefined;
    });
    return this.#listing;
  }
}
