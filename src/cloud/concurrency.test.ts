import assert from 'node:assert/strict';
import { test } from 'node:test';
import { mapConcurrent } from './concurrency.ts';

test('at most limit calls run at once and results keep input order', async () => {
  let inFlight = 0;
  let peak = 0;
  const out = await mapConcurrent([5, 1, 4, 2, 3], 2, async (n) => {
    inFlight++;
    peak = Math.max(peak, inFlight);
    await new Promise((resolve) => setImmediate(resolve));
    inFlight--;
    return n * 10;
  });
  assert.deepEqual(out, [50, 10, 40, 20, 30]);
  assert.equal(peak, 2);
  assert.deepEqual(await mapConcurrent([], 4, async () => 1), []);
});
