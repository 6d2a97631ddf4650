/**
 * The certificate expiry ledger, pure: which certificates the product issued (or holds) and when each
 * expires, so that an expiry is a planned rotation instead of an outage. It keeps, per kind and
 * instance (node, CA, replica), only the newest certificate — a node's re-issued certificate replaces
 * the one before — drops what has expired, and is capped, so that its size follows the cluster's
 * size and never the number of joins. The API-server store (store.ts) shards and persists it.
 */

/** The kinds that are not node profiles: the CAs that sign, and the controller's own serving certificate. */
export const caKind = 'ca';
export const servingKind = 'kops-controller-serving';

/** One certificate. Times are whole seconds since the epoch, as Prometheus timestamps are. */
export interface LedgerEntry {
  /** The profile (`kubelet`, `kubelet-server`, `kube-proxy`, …), `ca` or `kops-controller-serving`. */
  kind: string;
  /** The node's instance group; empty when unknown and for the CAs and the serving certificate. */
  instanceGroup: string;
  /** Whose it is: the node name, the CA's `name/keypair id`, or the replica (pod) name. */
  instance: string;
  /** The serial number, hex. */
  serial: string;
  notBefore: number;
  notAfter: number;
  /**
   * Set on certificates a running replica holds (CA, serving certificate): the entry is dropped when
   * no replica has said it still holds it by then, so a replaced pod or a CA taken out of the bundle
   * does not raise an alert for a certificate nobody uses.
   */
  heldUntil?: number;
}

/** The most entries one shard keeps: ~200 bytes each with usual names (the store also caps the bytes). */
export const maxEntriesPerShard = 4_000;

/** The identity under which an entry replaces an older one. */
export function entryKey(entry: Pick<LedgerEntry, 'kind' | 'instance'>): string {
  return `${entry.kind}_${entry.instance}`;
}

/** Whether `a` is newer than `b`: issued later, or as late and held longer. */
function newer(a: LedgerEntry, b: LedgerEntry): boolean {
  if (a.notBefore !== b.notBefore) return a.notBefore > b.notBefore;
  if (a.notAfter !== b.notAfter) return a.notAfter > b.notAfter;
  return (a.heldUntil ?? 0) > (b.heldUntil ?? 0);
}

/** Whether the entry still belongs in the ledger at `now` (seconds): not expired, and still held if held. */
export function isCurrent(entry: LedgerEntry, now: number): boolean {
  return entry.notAfter > now && (entry.heldUntil === undefined || entry.heldUntil > now);
}

/**
 * How long past its expiry, or its hold, an entry stays in the ledger: a day. A write drops entries by
 * the writer's clock, and what it drops never comes back: a replica whose clock runs ahead (an RTC
 * kept in local time is up to 14 h off until NTP steps it) would otherwise remove for good the
 * certificates expiring within its lead, the late renewals the alerts exist for. The gauge and the
 * listings still judge by {@link isCurrent}, without the margin.
 */
const keptPastExpirySeconds = 86_400;

/**
 * The order in which entries survive a cap: the current ones at `now`, earliest expiry first (the
 * ledger exists for those), then the ones only the margin keeps.
 */
export function keptFirst(now: number): (a: LedgerEntry, b: LedgerEntry) => number {
  return (a, b) => Number(!isCurrent(a, now)) - Number(!isCurrent(b, now)) || a.notAfter - b.notAfter;
}

/**
 * What the caller learns from {@link mergeEntries}: the ledger, and how many current entries the cap
 * dropped (entries only the margin keeps go first, and say nothing worth a warning).
 */
export interface Merged {
  entries: LedgerEntry[];
  droppedOverCap: number;
}

/**
 * Merges `added` into `existing`: per kind and instance the newer wins, entries expired or no longer
 * held for more than {@link keptPastExpirySeconds} go, and above `cap` the entries expiring LAST
 * are dropped ({@link keptFirst}) — the ledger exists for the earliest expiries, so those are the
 * ones it must never lose. Sorted by key, for stable writes.
 */
export function mergeEntries(
  existing: readonly LedgerEntry[],
  added: readonly LedgerEntry[],
  now: number,
  cap = maxEntriesPerShard,
): Merged {
  const byKey = new Map<string, LedgerEntry>();
  for (const entry of [...existing, ...added]) {
    if (!isCurrent(entry, now - keptPastExpirySeconds)) continue;
    const key = entryKey(entry);
    const held = byKey.get(key);
    if (!held) {
      byKey.set(key, entry);
      continue;
    }
    const [winner, loser] = newer(entry, held) ? [entry, held] : [held, entry];
    // A kubelet's renewal through the CSR API does not say its instance group; the node's does.
    byKey.set(
      key,
      winner.instanceGroup || !loser.instanceGroup
        ? winner
        : { ...winner, instanceGroup: loser.instanceGroup },
    );
  }
  let entries = [...byKey.values()];
  let droppedOverCap = 0;
  if (entries.length > cap) {
    entries.sort(keptFirst(now));
    droppedOverCap = entries.slice(cap).filter((entry) => isCurrent(entry, now)).length;
    entries = entries.slice(0, cap);
  }
  entries.sort((a, b) => (entryKey(a) < entryKey(b) ? -1 : entryKey(a) > entryKey(b) ? 1 : 0));
  return { entries, droppedOverCap };
}

/** The earliest expiry of one kind in one instance group: what the gauge exports. */
export interface EarliestExpiry {
  kind: string;
  instanceGroup: string;
  notAfter: number;
  /** Its whole validity (notAfter − notBefore): how soon a renewal was due, for certificates that are renewed. */
  lifetime: number;
  /** The instance and serial of that certificate, for the operator who must rotate it. */
  instance: string;
  serial: string;
}

/** The earliest expiry per kind and instance group among the current entries, sorted by kind then group. */
export function earliestByKindAndGroup(entries: readonly LedgerEntry[], now: number): EarliestExpiry[] {
  const earliest = new Map<string, EarliestExpiry>();
  for (const entry of entries) {
    if (!isCurrent(entry, now)) continue;
    const key = `${entry.kind}\u0000${entry.instanceGroup}`;
    const held = earliest.get(key);
    if (!held || entry.notAfter < held.notAfter) {
      const { kind, instanceGroup, notAfter, instance, serial } = entry;
      earliest.set(key, {
        kind,
        instanceGroup,
        notAfter,
        lifetime: notAfter - entry.notBefore,
        instance,
        serial,
      });
    }
  }
  return [...earliest.values()].sort(
    (a, b) => a.kind.localeCompare(b.kind) || a.instanceGroup.localeCompare(b.instanceGroup),
  );
}

/**
 * The share of its lifetime a certificate has left when a routine renewal is late: a kubelet renews
 * at 70–90 % of the lifetime (client-go's certificate manager), so under 10 % left it has not.
 */
export const renewalLateFraction = 0.1;

/**
 * The current entries that expire within `withinSeconds` of `now`, soonest first: by default only
 * those with less than {@link renewalLateFraction} of their lifetime left, the same rule as the
 * alerts, so that a one-day kubelet certificate awaiting its routine renewal is not listed; with
 * `includeRenewing`, all of them.
 */
export function expiringWithin(
  entries: readonly LedgerEntry[],
  now: number,
  withinSeconds: number,
  includeRenewing = false,
): LedgerEntry[] {
  return entries
    .filter(
      (entry) =>
        isCurrent(entry, now) &&
        entry.notAfter <= now + withinSeconds &&
        (includeRenewing || entry.notAfter - now < renewalLateFraction * (entry.notAfter - entry.notBefore)),
    )
    .sort((a, b) => a.notAfter - b.notAfter);
}

/** Seconds since the epoch, whole. */
export function epochSeconds(date: Date): number {
  return Math.floor(date.getTime() / 1000);
}
