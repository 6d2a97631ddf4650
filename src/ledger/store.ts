/**
 * The expiry ledger in the API server, so that it survives restarts and leader changes: a fixed set
 * of ConfigMaps (shards, by a hash of the instance) in the bootstrap namespace, each holding its
 * entries as one JSON array. Every replica issues certificates, so every replica writes: each write
 * reads the shard, merges (ledger.ts) and replaces it with the resourceVersion it read, and on 409
 * reads and merges again, so that two replicas writing at once never lose each other's entries.
 */
import { createHash } from 'node:crypto';
import type { CoreV1Api, KubeConfig, V1ConfigMap } from '@kubernetes/client-node';
import { KopsError } from '../errors.ts';
import { fromApiException, httpStatusOfApiError } from '../kube/api-errors.ts';
import { kubeAnswerError, kubeHttps, kubeJson } from '../kube/kube-https.ts';
import {
  entryKey,
  epochSeconds,
  keptFirst,
  type LedgerEntry,
  maxEntriesPerShard,
  mergeEntries,
} from './ledger.ts';

/** The label every shard carries (value: the shard number), so that one list reads the whole ledger. */
export const ledgerLabel = 'kops.k8s.io/certificate-ledger';
/** The ConfigMap data key holding a shard's entries. */
const dataKey = 'entries.json';
/** The most bytes a shard's JSON may take: a ConfigMap holds 1 MiB, metadata included. */
const maxShardBytes = 900_000;
/** How often one write retries after losing a race to another replica. */
const maxConflicts = 10;

/** A jittered, growing pause after a lost race, so that two replicas do not collide again in step. */
function backoff(attempt: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.random() * 10 * 2 ** Math.min(attempt, 6)));
}

/** Options of {@link ConfigMapLedgerStore}. */
export interface LedgerStoreOptions {
  core: CoreV1Api;
  /**
   * When given, shards are read and written over plain HTTPS with one keep-alive agent
   * (src/kube/kube-https.ts) instead of through `core`. Every replica flushes every 2 s during a join
   * storm, and through client-node each flush's read and replace of a shard of up to 900 kB went
   * through its fetch dispatcher, web streams and object serializer (docs/performance.md). `core`
   * still lists the ledger (the expiry gauge and `certs`, rarely).
   */
  kubeConfig?: KubeConfig;
  /** Deadline of each shard read or write over `kubeConfig` (default 10 s). */
  timeoutMs?: number;
  /** Where the shards live (`bootstrap.replayNamespace`, default kube-system). */
  namespace?: string;
  /** How many ConfigMaps the ledger is spread over; every reader and writer must agree (default 16). */
  shards?: number;
  /** Entries one shard keeps at most (default {@link maxEntriesPerShard}). */
  maxEntriesPerShard?: number;
  now?: () => Date;
}

/** The ConfigMap name of shard `index`. */
export function shardName(index: number): string {
  return `kops-controller-certificate-ledger-${index.toString(16).padStart(2, '0')}`;
}

/** Whether `value` is a well-formed entry; anything else in a shard (a hand edit) is skipped, not trusted. */
function isEntry(value: unknown): value is LedgerEntry {
  const e = value as Partial<LedgerEntry> | null;
  return (
    typeof e === 'object' &&
    e !== null &&
    typeof e.kind === 'string' &&
    typeof e.instanceGroup === 'string' &&
    typeof e.instance === 'string' &&
    typeof e.serial === 'string' &&
    Number.isSafeInteger(e.notBefore) &&
    Number.isSafeInteger(e.notAfter) &&
    (e.heldUntil === undefined || Number.isSafeInteger(e.heldUntil))
  );
}

/** The entries of a shard ConfigMap: the well-formed ones; a shard that is not JSON reads as empty. */
export function entriesOf(configMap: V1ConfigMap | undefined): LedgerEntry[] {
  const text = configMap?.data?.[dataKey];
  if (!text) return [];
  try {
    const parsed: unknown = JSON.parse(text);
    return Array.isArray(parsed) ? parsed.filter(isEntry) : [];
  } catch {
    return [];
  }
}

/** A shard's new content from its current entries and the entries of the call. */
type ShardChange = (
  existing: LedgerEntry[],
  entries: readonly LedgerEntry[],
) => { json: string; droppedOverCap: number };

/** How the store reads and writes one shard; every failure but a lost race is a typed error. */
interface Shards {
  /** The shard, or undefined when it does not exist (404). */
  read(name: string, action: string): Promise<V1ConfigMap | undefined>;
  /** Replaces the shard (`exists`) or creates it; false when another replica wrote it first (409). */
  write(body: V1ConfigMap, exists: boolean, action: string): Promise<boolean>;
}

/** Shards through client-node. */
function clientNodeShards(core: CoreV1Api, namespace: string): Shards {
  return {
    async read(name, action) {
      try {
        return await core.readNamespacedConfigMap({ name, namespace });
      } catch (err) {
        if (httpStatusOfApiError(err) === 404) return undefined;
        throw fromApiException(err, action);
      }
    },
    async write(body, exists, action) {
      const name = body.metadata?.name ?? '';
      try {
        if (exists) await core.replaceNamespacedConfigMap({ name, namespace, body });
        else await core.createNamespacedConfigMap({ namespace, body });
        return true;
      } catch (err) {
        if (httpStatusOfApiError(err) === 409) return false;
        throw fromApiException(err, action);
      }
    },
  };
}

/** The largest shard answer read: a ConfigMap holds at most 1 MiB, metadata included. */
const maxShardAnswerBytes = 2 * 1024 * 1024;

/** Shards over plain HTTPS (src/kube/kube-https.ts). */
function httpsShards(kubeConfig: KubeConfig, namespace: string, timeoutMs: number): Shards {
  const call = kubeHttps(kubeConfig, { timeoutMs });
  const collection = `/api/v1/namespaces/${encodeURIComponent(namespace)}/configmaps`;
  return {
    async read(name, action) {
      const path = `${collection}/${encodeURIComponent(name)}`;
      const answer = await call({ action, method: 'GET', path, maxBodyBytes: maxShardAnswerBytes });
      if (answer.status === 404) return undefined;
      if (answer.status !== 200) throw kubeAnswerError(answer, action);
      return kubeJson<V1ConfigMap>(answer, action);
    },
    async write(configMap, exists, action) {
      const body = JSON.stringify({ apiVersion: 'v1', kind: 'ConfigMap', ...configMap });
      const name = encodeURIComponent(configMap.metadata?.name ?? '');
      const answer = await call({
        action,
        method: exists ? 'PUT' : 'POST',
        path: exists ? `${collection}/${name}` : collection,
        body,
        maxBodyBytes: maxShardAnswerBytes,
      });
      if (answer.status === 409) return false;
      if (answer.status !== 200 && answer.status !== 201) throw kubeAnswerError(answer, action);
      return true;
    },
  };
}

/** What one {@link ConfigMapLedgerStore.add} or remove did. */
export interface AddResult {
  /** Shards written. */
  writes: number;
  /** Entries the per-shard cap dropped (those expiring last). */
  droppedOverCap: number;
  /** The bytes of the shards written (their entries' JSON): what the write cost, read again as much. */
  bytes: number;
}

/** The ledger's shards in the API server. */
export class ConfigMapLedgerStore {
  readonly #core: CoreV1Api;
  readonly #namespace: string;
  readonly #shards: number;
  readonly #cap: number;
  readonly #now: () => Date;
  readonly #io: Shards;

  constructor(options: LedgerStoreOptions) {
    this.#core = options.core;
    this.#namespace = options.namespace ?? 'kube-system';
    this.#io = options.kubeConfig
      ? httpsShards(options.kubeConfig, this.#namespace, options.timeoutMs ?? 10_000)
      : clientNodeShards(this.#core, this.#namespace);
    this.#shards = options.shards ?? 16;
    this.#cap = options.maxEntriesPerShard ?? maxEntriesPerShard;
    this.#now = options.now ?? (() => new Date());
  }

  /** The shard an instance's entries live in. */
  shardOf(instance: string): number {
    return createHash('sha256').update(instance).digest().readUInt32BE(0) % this.#shards;
  }

  /** Every entry of the ledger, current or not (callers filter with the pure functions): one list call. */
  async list(): Promise<LedgerEntry[]> {
    try {
      const list = await this.#core.listNamespacedConfigMap({
        namespace: this.#namespace,
        labelSelector: ledgerLabel,
      });
      return list.items.flatMap((item) => entriesOf(item));
    } catch (err) {
      throw fromApiException(err, `list the certificate ledger in ${this.#namespace}`);
    }
  }

  /** Adds entries: one write per shard touched (more only when another replica wrote it meanwhile). */
  async add(entries: readonly LedgerEntry[]): Promise<AddResult> {
    return this.#update(entries, (existing, added) => this.#merge(existing, added));
  }

  /**
   * Removes exactly these certificates (kind, instance and serial), e.g. those of deleted nodes; a
   * newer certificate of the same instance, written meanwhile, stays.
   */
  async remove(entries: readonly LedgerEntry[]): Promise<AddResult> {
    return this.#update(entries, (existing, removed) => {
      const gone = new Set(removed.map((e) => `${entryKey(e)} ${e.serial}`));
      return this.#merge(
        existing.filter((e) => !gone.has(`${entryKey(e)} ${e.serial}`)),
        [],
      );
    });
  }

  /** Applies `change` to the shards of `entries`, one resourceVersion-checked write per shard. */
  async #update(entries: readonly LedgerEntry[], change: ShardChange): Promise<AddResult> {
    const byShard = new Map<number, LedgerEntry[]>();
    for (const entry of entries) {
      const shard = this.shardOf(entry.instance);
      const some = byShard.get(shard);
      if (some) some.push(entry);
      else byShard.set(shard, [entry]);
    }
    const results = await Promise.all(
      [...byShard].map(([shard, some]) => this.#updateShard(shard, (existing) => change(existing, some))),
    );
    return {
      writes: results.length,
      droppedOverCap: results.reduce((sum, result) => sum + result.droppedOverCap, 0),
      bytes: results.reduce((sum, result) => sum + result.bytes, 0),
    };
  }

  /** Merges, then shrinks the cap in proportion if unusually long names make the shard too large. */
  #merge(existing: LedgerEntry[], added: readonly LedgerEntry[]): { json: string; droppedOverCap: number } {
    const now = epochSeconds(this.#now());
    const merged = mergeEntries(existing, added, now, this.#cap);
    const json = JSON.stringify(merged.entries);
    if (Buffer.byteLength(json) <= maxShardBytes) return { json, droppedOverCap: merged.droppedOverCap };
    // Keep the entries that expire first while they fit, each measured: a cap in proportion to the
    // average entry kept too many when those entries were the longest (long node and group names),
    // and the API server then refused every write of the shard (422, over 1 MiB).
    let bytes = 2; // the array's brackets
    let cap = 0;
    for (const entry of [...merged.entries].sort(keptFirst(now))) {
      bytes += Buffer.byteLength(JSON.stringify(entry)) + (cap > 0 ? 1 : 0);
      if (bytes > maxShardBytes) break;
      cap++;
    }
    const smaller = mergeEntries(merged.entries, [], now, cap);
    return {
      json: JSON.stringify(smaller.entries),
      droppedOverCap: merged.droppedOverCap + smaller.droppedOverCap,
    };
  }

  async #updateShard(
    shard: number,
    change: (existing: LedgerEntry[]) => { json: string; droppedOverCap: number },
  ): Promise<{ droppedOverCap: number; bytes: number }> {
    const name = shardName(shard);
    const action = `write the certificate ledger ${this.#namespace}/${name}`;
    for (let attempt = 0; attempt < maxConflicts; attempt++) {
      if (attempt > 0) await backoff(attempt);
      const current = await this.#io.read(name, action);
      const merged = change(entriesOf(current));
      const body: V1ConfigMap = {
        metadata: {
          name,
          namespace: this.#namespace,
          labels: { ...current?.metadata?.labels, [ledgerLabel]: String(shard) },
          // The resourceVersion read: a replace fails with 409 if anyone wrote in between.
          ...(current?.metadata?.resourceVersion
            ? { resourceVersion: current.metadata.resourceVersion }
            : {}),
        },
        data: { [dataKey]: merged.json },
      };
      // false (409): another replica wrote (or created) the shard since we read it; merge with theirs.
      if (await this.#io.write(body, current !== undefined, action))
        return { droppedOverCap: merged.droppedOverCap, bytes: Buffer.byteLength(merged.json) };
    }
    throw new KopsError('conflict', `${action}: still conflicting after ${maxConflicts} attempts`);
  }
}
