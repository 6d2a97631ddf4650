import assert from 'node:assert/strict';
import { test } from 'node:test';
import { pooledRandomBytes } from './random.ts';

test('pooled random bytes: each draw is new bytes, across pool refills', () => {
  const seen = new Set<string>();
  // 600 draws of 16 bytes span three 4 KiB pools.
  for (let i = 0; i < 600; i++) {
    const bytes = pooledRandomBytes(16);
    assert.equal(bytes.length, 16);
    seen.add(bytes.toString('hex'));
  }
  assert.equal(seen.size, 600);
});

test('a draw larger than the pool is refused, not cut short', () => {
  assert.equal(pooledRandomBytes(4096).length, 4096);
  assert.throws(() => pooledRandomBytes(4097), RangeError);
});
