import assert from 'node:assert/strict';
import { describe, it, mock } from 'node:test';
import { LruCache } from './lru.ts';

describe('LruCache', () => {
  it('evicts the least recently used entry beyond its capacity', () => {
    const cache = new LruCache<string, number>({ maxEntries: 2 });
    cache.set('a', 1);
    cache.set('b', 2);
    assert.equal(cache.get('a'), 1); // a is now the most recent
    cache.set('c', 3);
    assert.equal(cache.get('b'), undefined);
    assert.equal(cache.get('a'), 1);
    assert.equal(cache.get('c'), 3);
    assert.equal(cache.size, 2);
  });

  it('expires entries after their time to live', () => {
    let now = 0;
    const cache = new LruCache<string, number>({ maxEntries: 10, ttlMs: 1000, now: () => now });
    cache.set('a', 1);
    now = 999;
    assert.equal(cache.get('a'), 1);
    now = 1000;
    assert.equal(cache.get('a'), undefined);
    assert.equal(cache.size, 0);
  });

  it('lets expired entries nobody asks for go as new ones arrive, not only once the cache is full', () => {
    let now = 0;
    const cache = new LruCache<string, number>({ maxEntries: 100_000, ttlMs: 3_600_000, now: () => now });
    // A thousand nodes identified, then deleted: their instances are never asked about again.
    for (let i = 0; i < 1_000; i++) cache.set(`i-gone-${i}`, i);
    now = 3_600_000;
    cache.set('i-new', 1);
    assert.equal(cache.size, 1, 'the hour-old entries went with the next store');
    // Entries within their lifetime stay.
    cache.set('i-other', 2);
    now = 3_600_000 + 1_800_000;
    cache.set('i-third', 3);
    assert.equal(cache.size, 3, 'nothing expired yet');
  });

  it('returns only entries younger than a maximum age asked for, keeping older ones for others', () => {
    let now = 0;
    const cache = new LruCache<string, number>({ maxEntries: 10, ttlMs: 3_600_000, now: () => now });
    cache.set('a', 1);
    now = 59_999;
    assert.equal(cache.get('a', 60_000), 1);
    now = 60_000;
    assert.equal(cache.get('a', 60_000), undefined);
    assert.equal(cache.get('a'), 1, 'still within the cache lifetime');
    assert.equal(cache.get('a', 0), undefined, 'a maximum age of 0 always misses');
  });

  it('measures ages on the monotonic clock: a wall clock stepped back after running ahead does not make an entry fresh', () => {
    let wall = Date.now() + 3_600_000; // an hour ahead, e.g. a VM restored with a wrong clock
    const dateNow = mock.method(Date, 'now', () => wall);
    try {
      const cache = new LruCache<string, string>({ maxEntries: 10, ttlMs: 3_600_000 });
      cache.set('i-1', 'running');
      wall -= 3_600_000; // NTP steps it back to the true time
      assert.equal(cache.get('i-1', 0), undefined, 'a maximum age of 0 is read now, never from the cache');
      assert.equal(cache.get('i-1', 60_000), 'running', 'younger than a minute on the monotonic clock');
    } finally {
      dateNow.mock.restore();
    }
  });

  it('fails closed on a negative age (an injected clock that went back): the entry is expired for every caller', () => {
    let now = 3_600_000;
    const cache = new LruCache<string, number>({ maxEntries: 10, ttlMs: 3_600_000, now: () => now });
    cache.set('a', 1);
    now = 0;
    assert.equal(cache.get('a', 0), undefined);
    assert.equal(cache.get('a', 60_000), undefined);
    assert.equal(cache.get('a'), undefined, 'nor for callers content with the cache lifetime');
    assert.equal(cache.size, 0);
  });

  it('deletes on request and rejects a nonsensical capacity', () => {
    const cache = new LruCache<string, number>({ maxEntries: 1 });
    cache.set('a', 1);
    assert.equal(cache.delete('a'), true);
    assert.equal(cache.get('a'), undefined);
    assert.throws(() => new LruCache({ maxEntries: 0 }), RangeError);
  });
});
