/**
 * Reads a cluster's kops objects from its configBase — `cluster-completed.spec` (falling back to
 * `config`) and `instancegroup/<name>` — caches them, and polls their versions so that an edited
 * instance group reaches the controller within one poll interval (kops' own cache held them for an
 * hour). A changed object that is missing or fails to parse never replaces the last good one: the
 * cache keeps serving it and the failure is reported, so nodes are never labelled from a broken file.
 */
import { EventEmitter } from 'node:events';
import { Gauge, type Registry } from 'prom-client';
import { describeError, InvalidInputError, NotFoundError } from '../errors.ts';
import { liveMembers } from '../kube/metrics.ts';
import { type Logger, silentLogger } from '../log.ts';
import { type Clock, systemClock } from '../runtime/clock.ts';
import {
  type Cluster,
  type InstanceGroup,
  kopsText,
  parseCluster,
  parseInstanceGroup,
} from './kops-types.ts';
import { OlderCopyGuard } from './older-copy.ts';
import { checkObjectPath, isObjectPath } from './paths.ts';
import type { StoredObject, Vfs } from './types.ts';

/** Where kops keeps each object under the configBase. */
export const clusterPaths = {
  completed: 'cluster-completed.spec',
  config: 'config',
  instanceGroup: (name: string) => `instancegroup/${name}`,
} as const;

/**
 * Default interval between version polls (the config's `stateStore.pollInterval`): an edit reaches
 * the nodes within it, at one HEAD per object per poll (docs/state-store.md prices it).
 */
export const defaultPollIntervalMs = 5_000;

/**
 * The longest a deleted instance group goes unchecked. Its last good object is still served (its
 * nodes may run on), but a group that `kops delete ig` removed for good would otherwise cost a HEAD
 * every poll for as long as the controller runs: it is checked after 1, 2, 4… polls, up to this. A
 * listing that shows it again ({@link ClusterStore.instanceGroups}) has it checked at the next poll.
 */
export const maxDeletedCheckIntervalMs = 10 * 60_000;

/** A failure to refresh one object; the previous good object stays in use. */
export interface StoreReadError {
  path: string;
  error: Error;
}

/** Events a ClusterStore emits. */
export interface ClusterStoreEvents {
  /** The cluster object changed (new content parsed successfully). */
  cluster: [Cluster];
  /** An instance group changed (new content parsed successfully). */
  instanceGroup: [InstanceGroup];
  /** A changed object could not be read or parsed; the last good one is kept. */
  readError: [StoreReadError];
}

/** Options of a ClusterStore. */
export interface ClusterStoreOptions {
  /** How often `start()` polls object versions (default {@link defaultPollIntervalMs}). */
  pollIntervalMs?: number;
  /** Where `kops_controller_state_store_stale_objects` is exported, while the store polls. */
  registry?: Registry;
  logger?: Logger;
  /** The clock that times how long the store keeps answering an older copy (tests move it). */
  clock?: Pick<Clock, 'monotonic'>;
}

/** The gauge's name: the objects served from their last good version. */
export const staleObjectsMetric = 'kops_controller_state_store_stale_objects';

/** The registry's polling stores, read by its stale-objects gauge at each scrape. */
function pollingStores(registry: Registry): Set<ClusterStore> {
  return liveMembers<ClusterStore>(registry, staleObjectsMetric, (polling) => {
    new Gauge({
      name: staleObjectsMetric,
      help: 'Objects of the state store served from their last good version, because their changed version could not be read or parsed (1 per object path), while this replica polls the store.',
      labelNames: ['path'],
      registers: [registry],
      collect() {
        this.reset();
        for (const store of polling) for (const path of store.staleObjects()) this.set({ path }, 1);
      },
    });
  });
}

interface Entry<T> {
  path: string;
  version: string;
  /** When the store says the object was written ({@link StoredObject.modifiedMs}), if it says. */
  modifiedMs?: number;
  value: T;
  /** The last refresh failure, cleared by the next success. */
  error?: Error;
  /** While the object is deleted: the polls to skip before it is checked again, and the last such wait. */
  deleted?: { skip: number; wait: number };
}

/**
 * The cluster and instance groups of one configBase. Objects are loaded on first use; `refresh()`
 * (called every poll interval after `start()`) re-reads those whose version changed.
 */
export class ClusterStore extends EventEmitter<ClusterStoreEvents> {
  readonly vfs: Vfs;
  readonly #pollIntervalMs: number;
  /** The most polls a deleted instance group is left unchecked ({@link maxDeletedCheckIntervalMs}). */
  readonly #maxDeletedWait: number;
  readonly #logger: Logger;
  #cluster: Entry<Cluster> | undefined;
  readonly #instanceGroups = new Map<string, Entry<InstanceGroup>>();
  readonly #loading = new Map<string, Promise<unknown>>();
  #timer: NodeJS.Timeout | undefined;
  /** The registry's stores that poll, which this one joins while it does (the stale-objects gauge). */
  readonly #polling: Set<ClusterStore> | undefined;
  #refreshing: Promise<void> | undefined;
  /** Refuses, for a while, a lagging replica's older copy of an object in use. */
  readonly #olderCopies: OlderCopyGuard;

  /** `vfs` is rooted at the cluster's configBase. */
  constructor(vfs: Vfs, options: ClusterStoreOptions = {}) {
    super();
    this.vfs = vfs;
    this.#pollIntervalMs = options.pollIntervalMs ?? defaultPollIntervalMs;
    this.#maxDeletedWait = Math.max(1, Math.floor(maxDeletedCheckIntervalMs / this.#pollIntervalMs));
    this.#logger = (options.logger ?? silentLogger).child({ component: 'cluster-store', store: vfs.url });
    this.#polling = options.registry ? pollingStores(options.registry) : undefined;
    const clock = options.clock ?? systemClock;
    this.#olderCopies = new OlderCopyGuard(vfs.url, () => clock.monotonic(), this.#logger);
  }

  /** The cluster: cached, loaded on first call. Throws if it was never readable. */
  async cluster(): Promise<Cluster> {
    if (this.#cluster) return this.#cluster.value;
    const entry = await this.#once('cluster', () => this.#loadCluster());
    return entry.value;
  }

  /** One instance group: cached, loaded on first call. Throws NotFoundError if it does not exist. */
  async instanceGroup(name: string): Promise<InstanceGroup> {
    if (name.includes('/')) {
      throw new InvalidInputError(`invalid instance group name "${name}": names cannot contain "/"`);
    }
    const cached = this.#instanceGroups.get(name);
    if (cached) return cached.value;
    const entry = await this.#once(`ig/${name}`, () => this.#loadInstanceGroup(name));
    return entry.value;
  }

  /**
   * Every instance group in the store (listed now; objects come from the cache when unchanged). A group
   * listed but gone when read was deleted in between (or the listing lags): it is left out. A group
   * known deleted that is listed again (created again) is checked at the next poll.
   */
  async instanceGroups(): Promise<InstanceGroup[]> {
    const paths = await this.vfs.list('instancegroup/');
    const names = [
      ...new Set(
        paths
          .filter((p) => p.startsWith('instancegroup/') && isObjectPath(p))
          .map((p) => p.slice('instancegroup/'.length))
          .filter((n) => n !== '' && !n.includes('/')),
      ),
    ];
    for (const name of names) {
      const entry = this.#instanceGroups.get(name);
      if (entry) entry.deleted = undefined;
    }
    const groups = await Promise.all(
      names.map((name) =>
        this.instanceGroup(name).catch((err: unknown) => {
          if (err instanceof NotFoundError) return undefined;
          throw err;
        }),
      ),
    );
    return groups.filter((group) => group !== undefined);
  }

  /** The last refresh failure of a cached object (`cluster` or an instance group name), if any. */
  lastError(object: 'cluster' | { instanceGroup: string }): Error | undefined {
    return object === 'cluster'
      ? this.#cluster?.error
      : this.#instanceGroups.get(object.instanceGroup)?.error;
  }

  /** Starts polling versions every interval; idempotent. The timer does not keep the process alive. */
  start(): void {
    if (this.#timer) return;
    this.#timer = setInterval(() => void this.refresh(), this.#pollIntervalMs);
    this.#timer.unref();
    this.#polling?.add(this);
  }

  /** Stops polling. */
  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
    this.#polling?.delete(this);
  }

  /**
   * The paths served from their last good version because their changed version could not be read
   * or parsed. An instance group that is gone was deleted (`kops delete ig`): not a read that failed.
   */
  staleObjects(): string[] {
    return [
      ...(this.#cluster?.error ? [this.#cluster.path] : []),
      ...[...this.#instanceGroups.values()]
        .filter((entry) => entry.error && !(entry.error instanceof NotFoundError))
        .map((entry) => entry.path),
    ];
  }

  /**
   * Checks the version of every cached object and re-reads the changed ones, emitting `cluster` /
   * `instanceGroup` for good new content and `readError` otherwise. Overlapping calls share one pass.
   */
  refresh(): Promise<void> {
    this.#refreshing ??= this.#refreshAll().finally(() => {
      this.#refreshing = undefined;
    });
    return this.#refreshing;
  }

  async #refreshAll(): Promise<void> {
    const work: Promise<void>[] = [];
    if (this.#cluster) work.push(this.#refreshCluster(this.#cluster));
    for (const entry of this.#instanceGroups.values()) work.push(this.#refreshInstanceGroup(entry));
    await Promise.all(work);
  }

  #once<T>(key: string, load: () => Promise<T>): Promise<T> {
    const pending = this.#loading.get(key) as Promise<T> | undefined;
    if (pending) return pending;
    const promise = load().finally(() => this.#loading.delete(key));
    this.#loading.set(key, promise);
    return promise;
  }

  async #readCluster(): Promise<Entry<Cluster>> {
    for (const path of [clusterPaths.completed, clusterPaths.config]) {
      try {
        const { data, version, modifiedMs } = await this.vfs.read(path);
        const source = `${this.vfs.url}/${path}`;
        return {
          path,
          version,
          ...(modifiedMs !== undefined ? { modifiedMs } : {}),
          value: parseCluster(kopsText(data, source), source),
        };
      } catch (err) {
        if (!(err instanceof NotFoundError) || path === clusterPaths.config) throw err;
      }
    }
    throw new NotFoundError(`no cluster in ${this.vfs.url}`);
  }

  async #loadCluster(): Promise<Entry<Cluster>> {
    const read = await this.#readCluster().catch((err: unknown) => {
      if (err instanceof NotFoundError) {
        throw new NotFoundError(
          `no cluster at ${this.vfs.url}: neither ${clusterPaths.completed} nor ${clusterPaths.config} exists; ` +
            'check configBase (it must be <state store>/<cluster name>)',
          { cause: err },
        );
      }
      throw err;
    });
    this.#cluster = read;
    return read;
  }

  async #loadInstanceGroup(name: string): Promise<Entry<InstanceGroup>> {
    const path = clusterPaths.instanceGroup(name);
    checkObjectPath(path);
    const { data, version, modifiedMs } = await this.vfs.read(path).catch((err: unknown) => {
      if (err instanceof NotFoundError) {
        throw new NotFoundError(
          `instance group "${name}" does not exist: ${this.vfs.url}/${path} is missing`,
          {
            cause: err,
          },
        );
      }
      throw err;
    });
    const value = this.#parseInstanceGroup(name, path, data);
    const entry = { path, version, ...(modifiedMs !== undefined ? { modifiedMs } : {}), value };
    this.#instanceGroups.set(name, entry);
    return entry;
  }

  /** Parses an instance group and checks it is the one its file is named after. */
  #parseInstanceGroup(name: string, path: string, data: Buffer): InstanceGroup {
    const source = `${this.vfs.url}/${path}`;
    const value = parseInstanceGroup(kopsText(data, source), source);
    if (value.metadata.name !== name) {
      throw new InvalidInputError(
        `${source}: metadata.name is "${value.metadata.name}", but the file is for instance group "${name}"`,
      );
    }
    return value;
  }

  #fail(entry: Entry<unknown>, error: Error): void {
    const first = entry.error === undefined || entry.error.message !== error.message;
    entry.error = error;
    // Log a failure once, not on every poll while it persists.
    if (first) {
      this.#logger.warn({ path: entry.path, err: describeError(error) }, 'keeping the last good object');
    }
    this.emit('readError', { path: entry.path, error });
  }

  async #refreshCluster(entry: Entry<Cluster>): Promise<void> {
    try {
      // The completed spec wins when present; `config` is watched only when it is all there is.
      const completed = await this.vfs.stat(clusterPaths.completed);
      const path = completed !== undefined ? clusterPaths.completed : clusterPaths.config;
      const version = completed ?? (await this.vfs.stat(clusterPaths.config));
      if (version === undefined) {
        throw new NotFoundError(`${this.vfs.url}: the cluster spec has been deleted`);
      }
      if (path === entry.path && version === entry.version) {
        entry.error = undefined;
        return;
      }
      const read = await this.#readCluster();
      if (read.path === entry.path) this.#olderCopies.check(entry.path, entry, read);
      this.#cluster = read;
      this.#logger.info({ path: read.path, version: read.version }, 'cluster changed');
      this.emit('cluster', read.value);
    } catch (err) {
      this.#fail(entry, err as Error);
    }
  }

  async #refreshInstanceGroup(entry: Entry<InstanceGroup>): Promise<void> {
    if (entry.deleted && entry.deleted.skip > 0) {
      entry.deleted.skip--;
      return;
    }
    try {
      const version = await this.vfs.stat(entry.path);
      if (version === undefined) {
        const wait = entry.deleted ? Math.min(2 * entry.deleted.wait, this.#maxDeletedWait) : 1;
        entry.deleted = { skip: wait, wait };
        throw new NotFoundError(`${this.vfs.url}/${entry.path} has been deleted`);
      }
      entry.deleted = undefined;
      if (version === entry.version) {
        entry.error = undefined;
        return;
      }
      const read = await this.vfs.read(entry.path);
      this.#olderCopies.check(entry.path, entry, read);
      const { data, version: readVersion, modifiedMs } = read;
      const value = this.#parseInstanceGroup(entry.path.slice('instancegroup/'.length), entry.path, data);
      const fresh = {
        path: entry.path,
        version: readVersion,
        ...(modifiedMs !== undefined ? { modifiedMs } : {}),
        value,
      };
      this.#instanceGroups.set(entry.path.slice('instancegroup/'.length), fresh);
      this.#logger.info({ path: entry.path, version: readVersion }, 'instance group changed');
      this.emit('instanceGroup', value);
    } catch (err) {
      this.#fail(entry, err as Error);
    }
  }
}

/** The kops YAML texts of one cluster, for seeding a state store. */
export interface ClusterSeed {
  /** The Cluster object (written as both `config` and `cluster-completed.spec`). */
  cluster: string;
  /** InstanceGroup objects; each is stored under its `metadata.name`. */
  instanceGroups: string[];
}

/**
 * Writes a cluster into a state store the way kops lays it out: `<configBase>/config`,
 * `<configBase>/cluster-completed.spec` and `<configBase>/instancegroup/<name>`. Every object is
 * validated first, so a seeded store is always readable. `configBase` is relative to the VFS root
 * (usually the cluster name).
 */
export async function seedClusterStore(vfs: Vfs, configBase: string, seed: ClusterSeed): Promise<void> {
  checkObjectPath(configBase);
  parseCluster(seed.cluster, 'seed cluster');
  const groups = seed.instanceGroups.map((text, i) => ({
    name: parseInstanceGroup(text, `seed instance group ${i + 1}`).metadata.name,
    text,
  }));
  await vfs.write(`${configBase}/${clusterPaths.config}`, seed.cluster);
  await vfs.write(`${configBase}/${clusterPaths.completed}`, seed.cluster);
  await Promise.all(
    groups.map((g) => vfs.write(`${configBase}/${clusterPaths.instanceGroup(g.name)}`, g.text)),
  );
}
