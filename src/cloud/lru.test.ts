import assert from 'node:assert/strict';
import { test } from 'node:test';
import { LruCache } from './lru.ts';

test('the least recently used entry is evicted when the cache is full', () => {
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

test('entries expire after the time to live', () => {
  let now = 1_000;
  const cache = new LruCache<string, string>({ maxEntries: 10, ttlMs: 100, now: () => now });
  cache.set('k', 'v');
  now += 99;
  assert.equal(cache.get('k'), 'v');
  now += 1;
  assert.equal(cache.get('k'), undefined);
  assert.equal(cache.size, 0);
});

test('delete forgets a key and a bad size is refused', () => {
  const cache = new LruCache<string, number>({ maxEntries: 1 });
  cache.set('a', 1);
  cache.delete('a');
  assert.equal(cache.get('a'), undefined);
  assert.throws(() => new LruCache({ maxEntries: 0 }), RangeError);
});
