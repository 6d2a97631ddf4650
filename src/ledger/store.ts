/**
 * The expiry ledger in the API server, so that it survives restarts and leader changes: a fixed set
 * of ConfigMaps (shards, by a hash of the instance) in the bootstrap namespace, each holding its
 * entries as one JSON array. Every replica issues certificates, so every replica writes: each write
 * reads the shard, merges (ledger.ts) and replaces it with the resourceVersion it read, and on 409
 * reads and merges again, so that two replicas writing at once never lose each other's entries.
 */
import { createHash } from 'node:crypto';
import type { CoreV1Api, V1ConfigMap } from '@kubernetes/client-node';
import { KopsError } from '../errors.ts';
import { fromApiException, httpStatusOfApiError } from '../kube/api-errors.ts';
import { entryKey, epochSeconds, type LedgerEntry, maxEntriesPerShard, mergeEntries } from './ledger.ts';

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

/** What one {@link ConfigMapLedgerStore.add} or remove did. */
export interface AddResult {
  /** Shards written. */
  writes: number;
  /** Entries the per-shard cap dropped (those expiring last). */
  droppedOverCap: number;
}

/** The ledger's shards in the API server. */
export class ConfigMapLedgerStore {
  readonly #core: CoreV1Api;
  readonly #namespace: string;
  readonly #shards: number;
  readonly #cap: number;
  readonly #now: () => Date;

  constructor(options: LedgerStoreOptions) {
    this.#core = options.core;
    this.#namespace = options.namespace ?? 'kube-system';
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
      byShard.set(shard, [...(byShard.get(shard) ?? []), entry]);
    }
    const results = await Promise.all(
      [...byShard].map(([shard, some]) => this.#updateShard(shard, (existing) => change(existing, some))),
    );
    return {
      writes: results.length,
      droppedOverCap: results.reduce((sum, dropped) => sum + dropped, 0),
    };
  }

  /** Merges, then shrinks the cap in proportion if unusually long names make the shard too large. */
  #merge(existing: LedgerEntry[], added: readonly LedgerEntry[]): { json: string; droppedOverCap: number } {
    const now = epochSeconds(this.#now());
    const merged = mergeEntries(existing, added, now, this.#cap);
    const json = JSON.stringify(merged.entries);
    if (Buffer.byteLength(json) <= maxShardBytes) return { json, droppedOverCap: merged.droppedOverCap };
    const cap = Math.floor((merged.entries.length * maxShardBytes) / Buffer.byteLength(json));
    const smaller = mergeEntries(merged.entries, [], now, cap);
    return {
      json: JSON.stringify(smaller.entries),
      droppedOverCap: merged.droppedOverCap + smaller.droppedOverCap,
    };
  }

  async #updateShard(
    shard: number,
    change: (existing: LedgerEntry[]) => { json: string; droppedOverCap: number },
  ): Promise<number> {
    const name = shardName(shard);
    const action = `write the certificate ledger ${this.#namespace}/${name}`;
    for (let attempt = 0; attempt < maxConflicts; attempt++) {
      if (attempt > 0) await backoff(attempt);
      let current: V1ConfigMap | undefined;
      try {
        current = await this.#core.readNamespacedConfigMap({ name, namespace: this.#namespace });
      } catch (err) {
        if (httpStatusOfApiError(err) !== 404) throw fromApiException(err, action);
      }
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
      try {
        if (current) await this.#core.replaceNamespacedConfigMap({ name, namespace: this.#namespace, body });
        else await this.#core.createNamespacedConfigMap({ namespace: this.#namespace, body });
        return merged.droppedOverCap;
      } catch (err) {
        // 409: another replica wrote (or created) the shard since we read it; merge with theirs.
        if (httpStatusOfApiError(err) !== 409) throw fromApiException(err, action);
      }
    }
    throw new KopsError('conflict', `${action}: still conflicting after ${maxConflicts} attempts`);
  }
}
