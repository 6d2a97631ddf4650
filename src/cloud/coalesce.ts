/**
 * Coalesces lookups that arrive within a short window into one batch, so that many callers asking
 * for one key each (a controller reconciling nodes one by one) still cost one batched cloud call.
 */

/** A batched lookup: resolves each key of one batch; keys it leaves out are absent for their caller. */
export type BatchLookup<K, V> = (keys: K[]) => Promise<Map<K, V>>;

/**
 * Wraps a batched lookup so that calls made within `windowMs` of the first pending call are served
 * by a single invocation over the union of their keys. Each caller receives only its own keys; if the
 * batch fails, every caller of that batch receives the error.
 */
export function coalesce<K, V>(lookup: BatchLookup<K, V>, windowMs: number): BatchLookup<K, V> {
  let pending: { keys: Set<K>; waiters: Array<(outcome: Promise<Map<K, V>>) => void> } | undefined;

  const flush = () => {
    const batch = pending;
    pending = undefined;
    if (!batch) return;
    const outcome = lookup([...batch.keys]);
    for (const waiter of batch.waiters) waiter(outcome);
  };

  return (keys) => {
    if (keys.length === 0) return Promise.resolve(new Map());
    if (!pending) {
      pending = { keys: new Set(), waiters: [] };
      setTimeout(flush, windowMs);
    }
    const batch = pending;
    for (const key of keys) batch.keys.add(key);
    return new Promise<Map<K, V>>((resolve) => batch.waiters.push(resolve)).then(async (all) => {
      const results = await all;
      const mine = new Map<K, V>();
      for (const key of keys) {
        if (results.has(key)) mine.set(key, results.get(key) as V);
      }
      return mine;
    });
  };
}
