/**
 * Node identity for the clouds whose only group concept is a label or tag on each server (Hetzner
 * Cloud, DigitalOcean, Linode): the cloud's own record of the server names the cluster and the
 * instance group, and kops' identifiers read it with one GET per node. Here a batch of nodes costs as
 * few calls as the API allows: a few nodes are read one by one (fresh, as kops does), a crowd of them
 * with one paginated list of the cluster's servers — a 5,000-node storm is 100 Hetzner pages, 25
 * DigitalOcean pages or 10 Linode pages instead of 5,000 GETs. Verified records are cached (as kops
 * caches them for 60 minutes); a caller deciding trust bounds their age with `maxAgeMs`. A read that
 * says a server is gone or no longer ours — a 404, or a list of the cluster that lacks it — takes it
 * out of the cache at once, so no caller is told it runs for the rest of the 60 minutes. The list
 * alone refuses no node: an asked-for server it lacks is read by id (see `identifyBatch`).
 * Each identity names the server's incarnation: its id, which none of these clouds gives another
 * server, and the creation time its record states (read by cloud-time.ts, as the other clouds'
 * readers do), so a name re-used by a new server is never taken for the server a certificate was issued to.
 * (Shared by src/cloud/hetzner, src/cloud/digitalocean and src/cloud/linode.)
 */
import {
  ConfigError,
  ForbiddenError,
  InvalidInputError,
  KopsError,
  NotFoundError,
  UnavailableError,
} from '../errors.ts';
import { isJsonObject, isStringList } from '../json-object.ts';
import { type Logger, silentLogger } from '../log.ts';
import { monotonicMs } from './age.ts';
import { malformedAnswer } from './api-answer.ts';
import type { Outcome } from './batcher.ts';
import { mapConcurrent } from './concurrency.ts';
import { BatchedNodeIdentifier } from './identify-batches.ts';
import { instanceGroupNameProblem } from './instance-group-name.ts';
import { LruCache } from './lru.ts';
import type { CloudCallRecorder } from './metrics.ts';
import type { CloudRetryPolicy } from './retry.ts';
import { type GroupedServer, groupsOfServers } from './server-groups.ts';
import type {
  CloudGroup,
  CloudGroups,
  IdentifyResult,
  Incarnation,
  InstanceAddress,
  InstanceState,
  NodeIdentity,
} from './types.ts';

/** One server as the cloud records it, in the terms the identifier needs. */
export interface CloudServer {
  /** The cloud's id (decimal for all three clouds). */
  id: string;
  /** The server's name (Hetzner, DigitalOcean) or label (Linode). */
  name: string;
  state: InstanceState;
  /** The provider's own status word, for messages (`running`, `off`, `active`, ...). */
  status: string;
  /** Whether the status is one kops' identifier for the cloud accepts (running or on its way up). */
  live: boolean;
  /** The cluster its cluster label/tag names; undefined when it carries none. */
  clusterName: string | undefined;
  /** The instance group its label/tag names. */
  instanceGroup: string | undefined;
  addresses: InstanceAddress[];
  zone?: string;
  /** When the cloud created the server (its record's creation time), when the record says. */
  createdAt?: Date;
}

/** How a cloud's status words read: the state each one is, and those kops' identifier for the cloud accepts. */
export interface ServerStatuses {
  states: Readonly<Record<string, InstanceState>>;
  live: ReadonlySet<string>;
}

/** The fields of a cloud's server record the identifier reads, whatever the cloud calls them. */
export interface ServerRecord {
  id: number;
  name: string;
  status: string;
  clusterName: string | undefined;
  instanceGroup: string | undefined;
  privateIps: readonly string[];
  publicIps: readonly string[];
  zone: string | undefined;
  /** The record's creation time, read with `cloudTime` (undefined: the record has none). */
  createdAt?: Date | undefined;
}

/**
 * The error a failed listing of the cluster gives each node it was to identify. The listing is the
 * controller's own request: a refusal of it (a 400 to its selector, a 404 from a wrong endpoint) says
 * nothing about the nodes, so it is a fault, retried, never a verdict (`invalid`, `not-found`,
 * `forbidden`) on every node of the batch.
 */
export function listingFault(err: Error, noun: string): Error {
  if (!(err instanceof KopsError) || !['invalid', 'not-found', 'forbidden'].includes(err.kind)) return err;
  return new UnavailableError(
    `the cloud refused the controller's listing of the cluster's ${noun}s: ${err.message}`,
    {
      cause: err,
      details: { ...err.details, reason: 'listing-refused' },
    },
  );
}

/** `value` (or `[]` when absent) when it is a list of strings; a malformed answer otherwise. */
function stringsOf(value: readonly unknown[] | undefined, what: string): string[] {
  if (value === undefined || value === null) return [];
  if (!isStringList(value)) throw malformedAnswer(`${what} is not a list of strings`);
  return [...value];
}

/** A field that is absent or a string; a malformed answer otherwise. */
function optionalString(value: unknown, what: string): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'string')
    throw malformedAnswer(`${what} is ${JSON.stringify(value)?.slice(0, 40)}, not a string`);
  return value;
}

/**
 * A server as the identifier sees it. Its addresses in kops' verifiers' order: private ones first
 * (the first is where the callback challenge is answered), then public ones, then its name. The
 * record is checked as it is read: a field of the wrong type (an id that is no positive integer, a
 * label or tag that is no string) makes the answer malformed ({@link malformedAnswer}), so it can
 * neither identify a node nor refuse one.
 */
export function cloudServer(statuses: ServerStatuses, record: ServerRecord): CloudServer {
  const { id } = record as { id: unknown };
  if (typeof id !== 'number' || !Number.isSafeInteger(id) || id <= 0) {
    throw malformedAnswer(
      `a server record's id ${JSON.stringify(id)?.slice(0, 40)} is not a positive integer`,
    );
  }
  const what = `the record of server ${id}`;
  const name = optionalString(record.name, `${what}: its name`) ?? '';
  const status = optionalString(record.status, `${what}: its status`);
  if (status === undefined) throw malformedAnswer(`${what} has no status`);
  const privateIps = stringsOf(record.privateIps, `${what}: its private addresses`);
  const publicIps = stringsOf(record.publicIps, `${what}: its public addresses`);
  const zone = optionalString(record.zone, `${what}: its location`);
  return {
    id: String(id),
    name,
    state: Object.hasOwn(statuses.states, status) ? (statuses.states[status] as InstanceState) : 'unknown',
    status,
    live: statuses.live.has(status),
    clusterName: optionalString(record.clusterName, `${what}: its cluster mark`),
    instanceGroup: optionalString(record.instanceGroup, `${what}: its instance group mark`),
    addresses: [
      ...privateIps.map((address): InstanceAddress => ({ type: 'InternalIP', address })),
      ...publicIps.map((address): InstanceAddress => ({ type: 'ExternalIP', address })),
      ...(name ? [{ type: 'Hostname' as const, address: name }] : []),
    ],
    ...(zone ? { zone } : {}),
    ...(record.createdAt ? { createdAt: record.createdAt } : {}),
  };
}

/**
 * `convert(raw)` for one server record of an answer: a record that is no object, or that `convert`
 * trips over (a list where an object belongs), is a malformed answer, never a TypeError.
 */
export function serverOfAnswer<R>(
  noun: string,
  raw: unknown,
  convert: (record: R) => CloudServer,
): CloudServer {
  if (!isJsonObject(raw)) {
    throw malformedAnswer(`the ${noun} record is ${raw === null ? 'null' : typeof raw}, not an object`);
  }
  try {
    return convert(raw as R);
  } catch (err) {
    if (err instanceof KopsError) throw err;
    throw malformedAnswer(`a ${noun} record is malformed: ${(err as Error).message}`);
  }
}

/** The list of an answer's page (`field` of `body`), each record converted; malformed when it is none. */
export function serversOfPage<R>(
  title: string,
  body: unknown,
  field: string,
  noun: string,
  convert: (record: R) => CloudServer,
): CloudServer[] {
  const list =
    typeof body === 'object' && body !== null ? (body as Record<string, unknown>)[field] : undefined;
  if (!Array.isArray(list)) {
    throw malformedAnswer(`${title} answered a page without a list of ${field} (a 200 carrying an error?)`);
  }
  return list.map((raw) => serverOfAnswer(noun, raw, convert));
}

/** The most servers one listing of a cluster may hold; more is a misbehaving API, not a cluster. */
const maxListedServers = 100_000;

/**
 * Guards one paginated listing against an API whose pages never end: a page that says more follow
 * must bring servers not seen yet (an empty page, or the same page again under a new number, ends
 * the listing as a malformed answer), and the listing stops with a fault past
 * {@link maxListedServers} servers' worth of pages.
 */
export class ListingGuard {
  readonly #title: string;
  readonly #maxPages: number;
  readonly #seen = new Set<string>();
  #pages = 0;

  constructor(title: string, pageSize: number) {
    this.#title = title;
    this.#maxPages = Math.ceil(maxListedServers / pageSize) + 1;
  }

  /** The number of pages a listing may take at most. */
  get maxPages(): number {
    return this.#maxPages;
  }

  /** Records one page; throws when `more` pages are announced after one that brought nothing new. */
  page(servers: readonly CloudServer[], more: boolean): void {
    this.#pages++;
    let fresh = 0;
    for (const server of servers) {
      if (!this.#seen.has(server.id)) fresh++;
      this.#seen.add(server.id);
    }
    if (!more) return;
    if (fresh === 0) {
      throw malformedAnswer(
        `${this.#title} announced another page after page ${this.#pages}, which listed no server not listed before; the listing is abandoned`,
      );
    }
    if (this.#pages >= this.#maxPages) {
      throw malformedAnswer(
        `${this.#title} announced more than ${this.#pages} pages (over ${maxListedServers} servers); the listing is abandoned`,
      );
    }
  }
}

/** What a cloud offers the identifier. */
export interface ServerDirectory {
  /** Every server carrying the cluster's label or tag, all pages. */
  listCluster(): Promise<CloudServer[]>;
  /** One server by id; NotFoundError when it does not exist. */
  get(id: string): Promise<CloudServer>;
  /** How many servers one list page holds (to weigh a list against single reads). */
  readonly pageSize: number;
}

/** How one cloud spells its providerIDs. */
export interface ProviderIdFormat {
  /** The server id a providerID names; throws InvalidInputError for another cloud's or a malformed one. */
  parse(providerID: string): string;
  format(id: string): string;
}

/** Options of {@link ClusterServerIdentifier}. */
export interface ClusterServerIdentifierOptions {
  directory: ServerDirectory;
  providerIds: ProviderIdFormat;
  /** Our kops cluster, as the cloud's label/tag spells it. */
  clusterName: string;
  /** The cloud's name for messages (`Hetzner server`, `droplet`, `Linode instance`). */
  noun: string;
  /** How the cloud marks a server of our cluster, for messages (`label kops.k8s.io/cluster=c.example.com`). */
  clusterMark: string;
  /** How it marks the instance group, for messages (`label kops.k8s.io/instance-group`). */
  groupMark: string;
  logger?: Logger;
  /** Verified servers remembered (default 20,000). */
  cacheSize?: number;
  /** How long a verified record is used without reading it again (default 60 minutes, as kops). */
  cacheTtlMs?: number;
  /** Calls to `identify` within this window share one batch (default 10 ms). */
  coalesceWindowMs?: number;
  /** Parallel single reads at most (default 8). */
  concurrency?: number;
  /**
   * Servers a batch's list lacks that are read by themselves, at most (default 16); more are a
   * fault for that batch (see `identifyBatch`).
   */
  maxUnlistedReads?: number;
  /** The clock the cache's ages are read from (default monotonic, see src/cloud/age.ts). */
  now?: () => number;
}

/** Resolves providerIDs to instance groups from the cloud's server records, batched and cached. */
export class ClusterServerIdentifier extends BatchedNodeIdentifier {
  readonly #o: ClusterServerIdentifierOptions;
  readonly #logger: Logger;
  /** Live servers of ours, by id; replaced by each list of the cluster (see {@link #listCluster}). */
  #verified: LruCache<string, CloudServer>;
  /** The cluster's size at the last list, to weigh the next list's pages against single reads. */
  #lastListed = 0;
  /** The last list of the cluster and when it was started (this identifier's clock), for `identifyListed`. */
  #lastList: { startedAt: number; listed: Map<string, CloudServer | Error> } | undefined;
  /** The list `identifyListed` started and waits for, shared by every caller meanwhile. */
  #pacedList: Promise<Map<string, CloudServer | Error>> | undefined;
  /** When a list `identifyListed` started last failed, and why. */
  #pacedFailure: { at: number; error: Error } | undefined;

  constructor(options: ClusterServerIdentifierOptions) {
    // One batch at a time: a second list of the whole cluster while one runs would be wasted calls.
    super({ windowMs: options.coalesceWindowMs, maxConcurrent: 1 });
    this.#o = options;
    this.#logger = options.logger ?? silentLogger;
    this.#verified = this.#emptyCache();
  }

  #emptyCache(): LruCache<string, CloudServer> {
    return new LruCache({
      maxEntries: this.#o.cacheSize ?? 20_000,
      ttlMs: this.#o.cacheTtlMs ?? 3_600_000,
      ...(this.#o.now ? { now: this.#o.now } : {}),
    });
  }

  /**
   * Every server carrying the cluster's mark, all pages. The list is the whole truth about the
   * cluster, so the cache becomes exactly its live members of ours: nodes whose events arrive in later
   * batches are answered from it instead of costing one read each, and a cached server the list lacks
   * (deleted, or now another cluster's) is forgotten.
   */
  async #listCluster(): Promise<Map<string, CloudServer | Error>> {
    const startedAt = this.#now();
    const listed = new Map<string, CloudServer | Error>();
    for (const server of await this.#o.directory.listCluster()) {
      const before = listed.get(server.id);
      if (before === undefined) listed.set(server.id, server);
      else if (!(before instanceof Error) && !sameRecord(before, server)) {
        // The same server twice, with different marks or states: neither record can be believed.
        this.#logger.warn(
          { instanceId: server.id, groups: [before.instanceGroup, server.instanceGroup] },
          `the cluster's list holds ${this.#o.noun} ${server.id} twice with different records; it is not identified until the API agrees with itself`,
        );
        listed.set(
          server.id,
          malformedAnswer(
            `the list of the cluster holds ${this.#o.noun} ${server.id} twice, with different records (instance group ${JSON.stringify(before.instanceGroup)} and ${JSON.stringify(server.instanceGroup)})`,
          ),
        );
      }
    }
    this.#lastListed = listed.size;
    const verified = this.#emptyCache();
    for (const [id, server] of listed) {
      if (!(server instanceof Error) && this.#verdict(this.#o.providerIds.format(id), server).ok)
        verified.set(id, server);
    }
    this.#verified = verified;
    if (!this.#lastList || this.#lastList.startedAt <= startedAt) this.#lastList = { startedAt, listed };
    return listed;
  }

  #now(): number {
    return (this.#o.now ?? monotonicMs)();
  }

  /**
   * The verdict on `providerID` from a list of the cluster, never from a read of it by id: the last
   * list when it is recent enough, else one listed now (one at a time, shared by every caller). A
   * server the list lacks is a fault (`unlisted`), read again with a later list. Lists are paced: a
   * new one only once the last is {@link pacedListIntervalMs} old, so that whatever a caller asks, this
   * costs the cloud at most one list per interval. For the bootstrap verifier of id-only proofs, which
   * anyone can send, once its budget of reads by id is spent (src/bootstrap/policies/cloud-id.ts).
   */
  async identifyListed(providerID: string): Promise<IdentifyResult> {
    let id: string;
    try {
      id = this.#o.providerIds.parse(providerID);
    } catch (err) {
      return { ok: false, error: err as Error };
    }
    let listed: Map<string, CloudServer | Error>;
    try {
      listed = await this.#pacedListing();
    } catch (err) {
      return { ok: false, error: listingFault(err as Error, this.#o.noun) };
    }
    const server = listed.get(id);
    if (server === undefined) {
      // The wait until the next list, its own: anyone can send ids no list holds, so these faults
      // must not count as the cloud failing (they would stretch every node's Retry-After, dependency.ts).
      const nextList = (this.#lastList?.startedAt ?? this.#now()) + this.pacedListIntervalMs;
      return {
        ok: false,
        error: new UnavailableError(
          `${this.#o.noun} ${id} is not in the last list of the cluster; it is looked for again in the next one`,
          {
            details: { instanceId: id, reason: 'unlisted' },
            retryAfterSeconds: Math.max(1, Math.ceil((nextList - this.#now()) / 1000)),
          },
        ),
      };
    }
    const outcome = this.#verdict(providerID, server);
    return outcome.ok ? { ok: true, identity: outcome.value } : outcome;
  }

  /**
   * How long a paced list serves before the next: 15 s, and 4 s per page of the cluster's last list
   * (a 5,000-server Hetzner cluster, 100 pages, lists every 400 s: a quarter of a call a second).
   */
  get pacedListIntervalMs(): number {
    const pages = Math.max(1, Math.ceil(this.#lastListed / this.#o.directory.pageSize));
    return Math.max(15_000, pages * 4_000);
  }

  #pacedListing(): Promise<Map<string, CloudServer | Error>> {
    const now = this.#now();
    const last = this.#lastList;
    if (last && now - last.startedAt < this.pacedListIntervalMs) return Promise.resolve(last.listed);
    // A list that failed is not tried again sooner than a list that succeeded would be: a throttled or
    // failing API is not asked once per caller.
    const failed = this.#pacedFailure;
    if (failed && now - failed.at < this.pacedListIntervalMs) return Promise.reject(failed.error);
    this.#pacedList ??= this.#listCluster()
      .catch((err: unknown) => {
        this.#pacedFailure = { at: now, error: err as Error };
        throw err;
      })
      .finally(() => {
        this.#pacedList = undefined;
      });
    return this.#pacedList;
  }

  /** The cluster's servers by instance group, read with one list (for validate and the metrics). */
  async groups(): Promise<CloudGroup[]> {
    const ours: GroupedServer[] = [];
    for (const server of (await this.#listCluster()).values()) {
      if (server instanceof Error) continue;
      if (server.clusterName !== this.#o.clusterName || !server.instanceGroup) continue;
      if (instanceGroupNameProblem(server.instanceGroup)) continue;
      const member = {
        instanceId: server.id,
        providerID: this.#o.providerIds.format(server.id),
        state: server.state,
        healthy: server.state === 'running',
      };
      ours.push({ instanceGroup: server.instanceGroup, member });
    }
    return groupsOfServers(ours);
  }

  protected async identifyBatch(
    providerIDs: string[],
    maxAges: ReadonlyMap<string, number>,
  ): Promise<Map<string, Outcome<NodeIdentity>>> {
    const results = new Map<string, Outcome<NodeIdentity>>();
    const toRead = new Map<string, string>();
    for (const providerID of providerIDs) {
      const maxAgeMs = maxAges.get(providerID);
      let id: string;
      try {
        id = this.#o.providerIds.parse(providerID);
      } catch (err) {
        results.set(providerID, { ok: false, error: err as Error });
        continue;
      }
      const cached = this.#verified.get(id, maxAgeMs);
      if (cached) results.set(providerID, this.#verdict(providerID, cached));
      else toRead.set(providerID, id);
    }
    if (toRead.size === 0) return results;

    // A list costs its pages whatever is asked; single reads cost one each. Take the cheaper.
    const listPages = Math.max(1, Math.ceil(this.#lastListed / this.#o.directory.pageSize));
    if (toRead.size <= listPages) {
      await this.#readEach([...toRead], results);
    } else {
      let listed: Map<string, CloudServer | Error> | Error;
      try {
        listed = await this.#listCluster();
      } catch (err) {
        listed = listingFault(err as Error, this.#o.noun);
      }
      const unlisted: Array<[string, string]> = [];
      for (const [providerID, id] of toRead) {
        const server = listed instanceof Error ? listed : listed.get(id);
        if (server === undefined) unlisted.push([providerID, id]);
        else results.set(providerID, this.#verdict(providerID, server));
      }
      // A list lacking a server proves nothing about it: pages read by number skip a server when
      // one listed before it goes away between pages (every later one moves up a place), and a
      // server just created may not be listed yet. Each such id is read by itself, a few a batch so
      // that a crowd of strangers' ids costs a bounded number of calls; the rest are a fault, read
      // in a later batch, never refused on the list's word alone.
      const reads = this.#o.maxUnlistedReads ?? 16;
      await this.#readEach(unlisted.slice(0, reads), results);
      for (const [providerID, id] of unlisted.slice(reads)) {
        results.set(providerID, { ok: false, error: this.#unconfirmed(id, unlisted.length, reads) });
      }
    }
    this.#logger.debug({ nodes: providerIDs.length, read: toRead.size }, `identified ${this.#o.noun}s`);
    return results;
  }

  /** Reads each of `ids` ([providerID, id]) by itself, `concurrency` at a time, into `results`. */
  async #readEach(ids: Array<[string, string]>, results: Map<string, Outcome<NodeIdentity>>): Promise<void> {
    await mapConcurrent(ids, this.#o.concurrency ?? 8, async ([providerID, id]) => {
      let server: CloudServer;
      try {
        server = await this.#o.directory.get(id);
      } catch (err) {
        // A server that no longer exists is forgotten; a failed read says nothing about it.
        if (err instanceof NotFoundError) this.#verified.delete(id);
        results.set(providerID, { ok: false, error: err as Error });
        return;
      }
      if (server.id !== id) {
        // Another server than the one asked for (a proxy or API mixing up answers): its record
        // says nothing about the asked one, and is neither answered nor remembered under its id.
        this.#logger.warn(
          { asked: id, answered: server.id },
          `the API answered a read of ${this.#o.noun} ${id} with ${this.#o.noun} ${server.id}`,
        );
        results.set(providerID, {
          ok: false,
          error: malformedAnswer(
            `the read of ${this.#o.noun} ${id} answered ${this.#o.noun} ${server.id}, not the server asked for`,
          ),
        });
        return;
      }
      results.set(providerID, this.#read(providerID, server));
    });
  }

  /** A server the cluster's list lacks, left unread in this batch (see {@link identifyBatch}). */
  #unconfirmed(id: string, unlisted: number, reads: number): UnavailableError {
    return new UnavailableError(
      `${this.#o.noun} ${id} is not in the list of the cluster; ${unlisted} such servers in one batch, ${reads} read by themselves, the rest in a later one`,
      { details: { instanceId: id, reason: 'unlisted' } },
    );
  }

  /** The verdict on a server just read by id; a live one of ours is remembered, any other forgotten. */
  #read(providerID: string, server: CloudServer): Outcome<NodeIdentity> {
    const outcome = this.#verdict(providerID, server);
    if (outcome.ok) this.#verified.set(server.id, server);
    else this.#verified.delete(server.id);
    return outcome;
  }

  /** The identity of a server as the cloud recorded it, or why it identifies no node of our cluster. */
  #verdict(providerID: string, server: CloudServer | Error): Outcome<NodeIdentity> {
    if (server instanceof Error) return { ok: false, error: server };
    const { noun, clusterMark, clusterName, groupMark } = this.#o;
    if (server.clusterName !== clusterName) {
      const whose =
        server.clusterName === undefined ? '' : ` (it belongs to cluster "${server.clusterName}")`;
      return {
        ok: false,
        error: new ForbiddenError(
          `${noun} ${server.id} (${server.name}) does not carry the ${clusterMark}${whose}`,
          {
            details: { instanceId: server.id, reason: 'foreign-cluster' },
          },
        ),
      };
    }
    if (!server.live) {
      return {
        ok: false,
        error: new ForbiddenError(
          `${noun} ${server.id} (${server.name}) is ${server.status}, not running; a stopped server gets no identity`,
          { details: { instanceId: server.id, reason: 'not-running' } },
        ),
      };
    }
    if (!server.instanceGroup) {
      return {
        ok: false,
        error: new ForbiddenError(
          `${noun} ${server.id} (${server.name}) has no ${groupMark}, so it names no instance group`,
          { details: { instanceId: server.id, reason: 'no-instance-group' } },
        ),
      };
    }
    const nameProblem = instanceGroupNameProblem(server.instanceGroup);
    if (nameProblem) {
      return {
        ok: false,
        error: new ForbiddenError(`${noun} ${server.id} (${server.name}): its ${groupMark} ${nameProblem}`, {
          details: { instanceId: server.id, reason: 'invalid-instance-group' },
        }),
      };
    }
    return {
      ok: true,
      value: {
        providerID,
        instanceId: server.id,
        instanceGroup: server.instanceGroup,
        state: server.state,
        addresses: server.addresses,
        ...(server.zone ? { zone: server.zone } : {}),
        incarnation: incarnationOf(server),
      },
    };
  }
}

/**
 * The server's incarnation: its id, which these clouds never give another server (Hetzner,
 * DigitalOcean and Linode number servers from one sequence), and its creation time.
 */
function incarnationOf(server: CloudServer): Incarnation {
  return { id: server.id, ...(server.createdAt ? { createdAt: server.createdAt } : {}) };
}

/** Whether two records of one server say the same about it (an offset page may list one twice). */
function sameRecord(a: CloudServer, b: CloudServer): boolean {
  return (
    a.clusterName === b.clusterName &&
    a.instanceGroup === b.instanceGroup &&
    a.status === b.status &&
    a.name === b.name &&
    a.createdAt?.getTime() === b.createdAt?.getTime() &&
    JSON.stringify(a.addresses) === JSON.stringify(b.addresses)
  );
}

/** The cloud groups of a cluster, from the identifier's list of its servers. */
export class ClusterServerGroups implements CloudGroups {
  readonly #identifier: ClusterServerIdentifier;
  readonly #clusterName: string;

  constructor(identifier: ClusterServerIdentifier, clusterName: string) {
    this.#identifier = identifier;
    this.#clusterName = clusterName;
  }

  async list(clusterName: string): Promise<CloudGroup[]> {
    if (clusterName !== this.#clusterName) {
      throw new ForbiddenError(
        `this controller lists the servers of cluster ${this.#clusterName}, not ${clusterName}`,
      );
    }
    return this.#identifier.groups();
  }
}

/** What the provider of a cloud identified by its server records offers the controller. */
export interface ClusterServerProvider {
  nodeIdentifier: ClusterServerIdentifier;
  cloudGroups: ClusterServerGroups;
  identifiesByNodeName: false;
  close(): void;
}

/**
 * The identifier and groups of one cluster over a cloud's server directory. `groupsClusterName` is
 * the kops cluster name the groups are listed for, where the cloud's tag spells it otherwise.
 */
export function clusterServerProvider(
  options: ClusterServerIdentifierOptions & { groupsClusterName?: string; close(): void },
): ClusterServerProvider {
  const { groupsClusterName, close, ...identifierOptions } = options;
  const nodeIdentifier = new ClusterServerIdentifier(identifierOptions);
  return {
    nodeIdentifier,
    cloudGroups: new ClusterServerGroups(nodeIdentifier, groupsClusterName ?? options.clusterName),
    identifiesByNodeName: false,
    close,
  };
}

/** What the provider of every cloud identified by its server records takes, besides where its API is. */
export interface ClusterServerCloudOptions {
  clusterName: string;
  /** Default the cloud's token variable. */
  token?: string;
  logger?: Logger;
  cloudCalls?: CloudCallRecorder;
  /** Retry and deadline settings of the API client (tests shorten them). */
  api?: Partial<CloudRetryPolicy> & { timeoutMs?: number };
}

/** The API token given, else the environment's; ConfigError saying what it must be when neither has one. */
export function requiredToken(given: string | undefined, variable: string, requirement: string): string {
  const token = given ?? process.env[variable];
  if (!token) throw new ConfigError(`${variable} is required on ${requirement}`);
  return token;
}

/** The largest int64, the bound of the ids kops reads with Go's strconv.ParseInt(…, 10, 64). */
export const maxInt64 = 2n ** 63n - 1n;

/** A cloud's decimal server ids (kops parses them as integers): a positive number of at most `maxDigits` digits. */
export class DecimalIds {
  readonly pattern: RegExp;
  readonly #noun: string;
  readonly #max: bigint | undefined;

  /**
   * `noun` names an id in messages (`Hetzner server id`); `max`, the largest id the cloud's own tools
   * read (kops parses Hetzner and DigitalOcean ids as int64): one above it names no server, and is
   * refused here rather than sent to the API, whose answer to it would say nothing about a node.
   */
  constructor(noun: string, maxDigits: number, max?: bigint) {
    this.#noun = noun;
    this.pattern = new RegExp(`^[1-9]\\d{0,${maxDigits - 1}}$`);
    this.#max = max;
  }

  /** `value` when it is an id; InvalidInputError naming `what` otherwise. */
  parse(value: string, what: string): string {
    if (!this.pattern.test(value) || (this.#max !== undefined && BigInt(value) > this.#max)) {
      throw new InvalidInputError(`${what} "${value.slice(0, 40)}" is not a ${this.#noun}`);
    }
    return value;
  }
}

/**
 * `<scheme>://<id>` providerIDs of one cloud (`cloud` and `idNoun` for messages). With `lastSegment`,
 * the id is read as the last segment of a longer path too (`linode:///<id>`, `linode://<region>/<id>`).
 */
export function schemeProviderIds(options: {
  scheme: string;
  cloud: string;
  idNoun: string;
  ids: DecimalIds;
  lastSegment?: boolean;
}): ProviderIdFormat {
  const prefix = `${options.scheme}://`;
  return {
    parse: (providerID) => {
      if (!providerID.startsWith(prefix)) {
        throw new InvalidInputError(
          `providerID "${providerID.slice(0, 80)}" is not a ${options.cloud} one (${prefix}<${options.idNoun}>)`,
        );
      }
      const rest = providerID.slice(prefix.length);
      const id = options.lastSegment
        ? (rest
            .replace(/^\/+|\/+$/g, '')
            .split('/')
            .at(-1) ?? '')
        : rest;
      return options.ids.parse(id, `providerID ${options.idNoun}`);
    },
    format: (id) => `${prefix}${id}`,
  };
}
