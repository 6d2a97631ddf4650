/**
 * Scaleway node identity: providerID → Instance server → its cluster and instance-group tags.
 * kops' identifier makes one `GetServer` per node; here concurrent `identify` calls within a short
 * window share one batch (batcher.ts), and a batch reads its servers with `ListServers` filtered by
 * id (`servers=<id>,<id>,…`, up to 100 a call: the Instance API's largest `per_page`) per zone, in
 * our project. The live servers of our cluster that have Private NICs then have their
 * Private-Network IPv4 addresses read from IPAM, as Scaleway's cloud controller manager reads them
 * for the Node's InternalIP (ipam.ts): one listing by the NIC ids of all the servers one ListServers
 * call answered, not one per server. IPAM failing fails the identities that needed it, as a fault:
 * an identity is never answered without the addresses the Node carries. Server records are kept,
 * with their IPAM addresses, for `cacheTtlMs` (kops' own optional cache keeps them an hour), so the
 * reconciles that follow a storm cost nothing; a caller deciding trust bounds their age with
 * `maxAgeMs`.
 *
 * Rate limits: Scaleway publishes no fixed request rate for the Instance or IPAM API; they answer
 * 429 `too_many_requests` with the quota and `reset_seconds`, which ScalewayClients honours. A storm
 * of 5,000 nodes on a Private Network costs 50 ListServers and 50 IPAM listings here (one page each
 * while each NIC holds one IPv4 address; against kops' 5,000 GetServer and the CCM's ListIPs per
 * NIC), at most `concurrency` ListServers (each followed by its listing) at a time.
 */
import { NotFoundError } from '../../errors.ts';
import { type Logger, silentLogger } from '../../log.ts';
import { malformedAnswer } from '../api-answer.ts';
import type { Outcome } from '../batcher.ts';
import { mapConcurrent } from '../concurrency.ts';
import { BatchedNodeIdentifier, outcomeOf } from '../identify-batches.ts';
import { LruCache } from '../lru.ts';
import type { NodeIdentity } from '../types.ts';
import { regionOfZone, type ScalewayClients } from './client.ts';
import { privateNetworkAddresses, privateNicsOf } from './ipam.ts';
import {
  identityOfServer,
  listedServersOfPage,
  parseScalewayProviderID,
  type ScalewayServerRef,
  scalewayProviderID,
} from './server.ts';

type Server = Awaited<ReturnType<ScalewayClients['instance']['getServer']>>['server'] & {};

/** A server's record and the IPv4 addresses IPAM lists for its Private NICs, read together. */
interface ServerFacts {
  server: Server;
  privateNetworkIps: string[];
}

/** The Instance API's largest page, hence the most ids one ListServers call can be asked for. */
export const maxServersPerCall = 100;

/** Options of {@link ScalewayNodeIdentifier}. */
export interface ScalewayNodeIdentifierOptions {
  clients: Pick<ScalewayClients, 'instance' | 'ipam' | 'call' | 'projectId'>;
  /** Our kops cluster: servers tagged for another are not our nodes. */
  clusterName: string;
  logger?: Logger;
  /** How long a server record, with its IPAM addresses, answers later calls (default 60 s). */
  cacheTtlMs?: number;
  /** Server records remembered (default 20,000). */
  cacheSize?: number;
  /** Calls to `identify` within this window share one batch (default 10 ms). */
  coalesceWindowMs?: number;
  /** ListServers calls in flight at most (default 4). */
  concurrency?: number;
  /** The clock the cache's ages are read from (default monotonic, see src/cloud/age.ts). */
  now?: () => number;
}

/** Resolves `scaleway://` providerIDs to kops instance groups through the Instance API. */
export class ScalewayNodeIdentifier extends BatchedNodeIdentifier {
  readonly #options: ScalewayNodeIdentifierOptions;
  readonly #logger: Logger;
  readonly #cache: LruCache<string, ServerFacts>;

  constructor(options: ScalewayNodeIdentifierOptions) {
    super({ windowMs: options.coalesceWindowMs, maxConcurrent: 2 });
    this.#options = options;
    this.#logger = options.logger ?? silentLogger;
    this.#cache = new LruCache({
      maxEntries: options.cacheSize ?? 20_000,
      ttlMs: options.cacheTtlMs ?? 60_000,
      ...(options.now ? { now: options.now } : {}),
    });
  }

  protected async identifyBatch(
    providerIDs: string[],
    maxAges: ReadonlyMap<string, number>,
  ): Promise<Map<string, Outcome<NodeIdentity>>> {
    const results = new Map<string, Outcome<NodeIdentity>>();
    const refs = new Map<string, ScalewayServerRef>();
    const toRead = new Map<string, Set<string>>();
    const cached = new Map<string, ServerFacts>();
    for (const providerID of providerIDs) {
      const maxAgeMs = maxAges.get(providerID);
      let ref: ScalewayServerRef;
      try {
        ref = parseScalewayProviderID(providerID);
      } catch (err) {
        results.set(providerID, { ok: false, error: err as Error });
        continue;
      }
      refs.set(providerID, ref);
      const server = this.#cache.get(`${ref.zone}/${ref.id}`, maxAgeMs);
      if (server) cached.set(`${ref.zone}/${ref.id}`, server);
      else toRead.set(ref.zone, (toRead.get(ref.zone) ?? new Set()).add(ref.id));
    }
    const read = await this.#read(toRead);
    for (const [providerID, ref] of refs) {
      const key = `${ref.zone}/${ref.id}`;
      const facts =
        cached.get(key) ??
        read.get(key) ??
        new NotFoundError(`server ${ref.id} not found in zone ${ref.zone}`);
      results.set(
        providerID,
        outcomeOf(
          facts instanceof Error
            ? facts
            : identityOfServer(
                providerID,
                facts.server,
                this.#options.clusterName,
                this.#options.clients.projectId,
                facts.privateNetworkIps,
              ),
        ),
      );
    }
    this.#logger.debug({ nodes: providerIDs.length, read: read.size }, 'identified Scaleway nodes');
    return results;
  }

  /**
   * The servers of each zone by `<zone>/<id>`, read 100 ids a call, each call followed by the IPAM
   * listing of its servers' Private NICs; a failed call fails its ids, a failed listing the ids of
   * the servers it was to give addresses.
   */
  async #read(byZone: Map<string, Set<string>>): Promise<Map<string, ServerFacts | Error>> {
    const chunks: Array<{ zone: string; ids: string[] }> = [];
    for (const [zone, ids] of byZone) {
      const all = [...ids];
      for (let i = 0; i < all.length; i += maxServersPerCall) {
        chunks.push({ zone, ids: all.slice(i, i + maxServersPerCall) });
      }
    }
    const out = new Map<string, ServerFacts | Error>();
    const { clients } = this.#options;
    await mapConcurrent(chunks, this.#options.concurrency ?? 4, async ({ zone, ids }) => {
      try {
        const page = await clients.call('instance.listServers', () =>
          // Awaited, the SDK's paginated answer is the one page asked for.
          clients.instance.listServers({
            zone,
            project: clients.projectId,
            servers: ids,
            perPage: maxServersPerCall,
          }),
        );
        const answered = new Map<string, Server | Error>();
        for (const server of listedServersOfPage(page, 1, maxServersPerCall)) {
          // Only what was asked: an API that answered more (a filter ignored) adds nothing.
          if (!ids.includes(server.id) || server.zone !== zone) continue;
          const before = answered.get(server.id);
          if (before === undefined) answered.set(server.id, server);
          else if (!(before instanceof Error) && !sameServer(before, server)) {
            // The same server twice, with different tags or states: neither record can be believed.
            this.#logger.warn(
              { instanceId: server.id, tags: [before.tags, server.tags] },
              `the Instance API listed server ${server.id} twice with different records; it is not identified until the API agrees with itself`,
            );
            answered.set(
              server.id,
              malformedAnswer(
                `the Instance API listed server ${server.id} twice, with different records (tags ${JSON.stringify(before.tags)} and ${JSON.stringify(server.tags)})`,
              ),
            );
          }
        }
        const addresses = await this.#privateNetworkAddresses(zone, answered);
        for (const [id, server] of answered) {
          const ips = addresses.get(id) ?? [];
          const facts =
            server instanceof Error
              ? server
              : ips instanceof Error
                ? ips
                : { server, privateNetworkIps: ips };
          out.set(`${zone}/${id}`, facts);
          if (facts instanceof Error) this.#cache.delete(`${zone}/${id}`);
          else this.#cache.set(`${zone}/${id}`, facts);
        }
      } catch (err) {
        for (const id of ids) out.set(`${zone}/${id}`, err as Error);
      }
    });
    return out;
  }

  /**
   * The Private-Network IPv4 addresses of the servers among `answered` whose identity has them (live
   * servers of our cluster with a Private NIC; the others get no identity, or the CCM reads no IPAM
   * address for them), by id, from one listing; when it fails, its error for each of those servers.
   */
  async #privateNetworkAddresses(
    zone: string,
    answered: ReadonlyMap<string, Server | Error>,
  ): Promise<Map<string, string[] | Error>> {
    const { clients, clusterName } = this.#options;
    const needed = [...answered.values()].filter(
      (server): server is Server =>
        !(server instanceof Error) &&
        privateNicsOf(server).length > 0 &&
        !(
          identityOfServer(
            scalewayProviderID({ zone, id: server.id }),
            server,
            clusterName,
            clients.projectId,
          ) instanceof Error
        ),
    );
    if (needed.length === 0) return new Map();
    try {
      return await privateNetworkAddresses(clients, regionOfZone(zone), needed);
    } catch (err) {
      return new Map(needed.map((server) => [server.id, err as Error]));
    }
  }
}

/** Whether two records of one server say the same about it (what identity reads from them). */
function sameServer(a: Server, b: Server): boolean {
  return (
    a.project === b.project &&
    a.state === b.state &&
    a.name === b.name &&
    a.privateIp === b.privateIp &&
    a.creationDate?.getTime() === b.creationDate?.getTime() &&
    JSON.stringify(a.tags) === JSON.stringify(b.tags) &&
    JSON.stringify(a.publicIps?.map((ip) => ip.address)) ===
      JSON.stringify(b.publicIps?.map((ip) => ip.address)) &&
    JSON.stringify(privateNicsOf(a).map((nic) => nic.id)) ===
      JSON.stringify(privateNicsOf(b).map((nic) => nic.id))
  );
}
