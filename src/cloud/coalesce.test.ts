import assert from 'node:assert/strict';
import { test } from 'node:test';
import { coalesce } from './coalesce.ts';

test('calls within the window share one batch and each gets its own keys', async () => {
  const batches: string[][] = [];
  const lookup = coalesce(async (keys: string[]) => {
    batches.push([...keys].sort());
    return new Map(keys.map((k) => [k, k.toUpperCase()]));
  }, 5);
  const [a, b, c] = await Promise.all([lookup(['a']), lookup(['b', 'a']), lookup(['c'])]);
  assert.deepEqual(batches, [['a', 'b', 'c']]);
  assert.deepEqual([...a], [['a', 'A']]);
  assert.deepEqual(
    [...b],
    [
      ['b', 'B'],
      ['a', 'A'],
    ],
  );
  assert.deepEqual([...c], [['c', 'C']]);
  await lookup(['d']);
  assert.equal(batches.length, 2);
});

test('a failed batch rejects every caller of that batch', async () => {
  const lookup = coalesce(async () => {
    throw new Error('cloud down');
  }, 1);
  const results = await Promise.allSettled([lookup(['a']), lookup(['b'])]);
  assert.deepEqual(
    results.map((r) => r.status),
    ['rejected', 'rejected'],
  );
});

test('an empty request costs no batch', async () => {
  let calls = 0;
  const lookup = coalesce(async () => {
    calls++;
    return new Map();
  }, 1);
  assert.equal((await lookup([])).size, 0);
  assert.equal(calls, 0);
});
