import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { NotFoundError } from '../errors.ts';
import { Batcher, type Outcome } from './batcher.ts';

function recordingBatcher(
  options: {
    maxBatchSize?: number;
    maxConcurrent?: number;
    windowMs?: number;
    callBudget?: { burst: number; perSecond: number };
  } = {},
) {
  const calls: number[][] = [];
  let running = 0;
  let maxRunning = 0;
  const batcher = new Batcher<number, string>({
    windowMs: options.windowMs ?? 5,
    maxBatchSize: options.maxBatchSize ?? 1000,
    maxConcurrent: options.maxConcurrent ?? 4,
    ...(options.callBudget ? { callBudget: options.callBudget } : {}),
    fetch: async (keys) => {
      calls.push(keys);
      running++;
      maxRunning = Math.max(maxRunning, running);
      await new Promise((r) => setImmediate(r));
      running--;
      if (keys.includes(-1)) throw new Error('whole batch failed');
      return new Map<number, Outcome<string>>(
        keys.map((k) => [
          k,
          k % 7 === 0 ? { ok: false, error: new NotFoundError(`${k}`) } : { ok: true, value: `v${k}` },
        ]),
      );
    },
  });
  return { batcher, calls, maxRunning: () => maxRunning };
}

describe('Batcher', () => {
  it('coalesces separate loads within the window into one call', async () => {
    const { batcher, calls } = recordingBatcher();
    const values = await Promise.all([batcher.load(1), batcher.load(2), batcher.load(3)]);
    assert.deepEqual(values, ['v1', 'v2', 'v3']);
    assert.deepEqual(calls, [[1, 2, 3]]);
  });

  it('asks for a key once while it is pending or in flight', async () => {
    const { batcher, calls } = recordingBatcher();
    const first = batcher.load(5);
    const again = batcher.load(5);
    assert.equal(first, again);
    await first;
    assert.deepEqual(calls, [[5]]);
  });

  it('splits into batches of at most maxBatchSize and limits concurrency', async () => {
    const { batcher, calls, maxRunning } = recordingBatcher({ maxBatchSize: 10, maxConcurrent: 2 });
    const keys = Array.from({ length: 95 }, (_, i) => i + 1);
    const outcomes = await batcher.loadMany(keys);
    assert.equal(calls.length, 10);
    assert.ok(calls.every((c) => c.length <= 10));
    assert.deepEqual(
      calls.flat().sort((a, b) => a - b),
      keys,
    );
    assert.ok(maxRunning() <= 2);
    assert.equal(outcomes.size, 95);
    assert.deepEqual(outcomes.get(1), { ok: true, value: 'v1' });
    const seven = outcomes.get(7);
    assert.ok(seven && !seven.ok && seven.error instanceof NotFoundError);
  });

  it('fails every key of a batch whose call fails, and only that batch', async () => {
    const { batcher } = recordingBatcher({ maxBatchSize: 2 });
    const outcomes = await batcher.loadMany([-1, 1, 2, 3]);
    assert.equal(outcomes.get(-1)?.ok, false);
    assert.equal(outcomes.get(1)?.ok, false);
    assert.deepEqual(outcomes.get(2), { ok: true, value: 'v2' });
    assert.deepEqual(outcomes.get(3), { ok: true, value: 'v3' });
  });

  describe('with a call budget', () => {
    const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

    it('keeps a batch that is not full open until the budget has a call, collecting keys meanwhile', async () => {
      // One call at once, then one every 500 ms.
      const { batcher, calls } = recordingBatcher({ callBudget: { burst: 1, perSecond: 2 } });
      assert.equal(await batcher.load(1), 'v1');
      const second = batcher.load(2);
      // Without the budget, 2 would go alone after the 5 ms window.
      await sleep(30);
      assert.deepEqual(calls, [[1]]);
      const more = batcher.loadMany([3, 4, 5]);
      assert.equal(await second, 'v2');
      assert.equal((await more).size, 3);
      assert.deepEqual(calls, [[1], [2, 3, 4, 5]]);
    });

    it('sends a full batch at once, without waiting for the budget', async () => {
      const { batcher, calls } = recordingBatcher({
        maxBatchSize: 3,
        callBudget: { burst: 1, perSecond: 2 },
      });
      await batcher.load(1);
      const all = batcher.loadMany([2, 3, 4, 5, 6, 8]);
      // Two full batches go at once, though the budget is spent (its next call is 500 ms away).
      await sleep(30);
      assert.deepEqual(calls, [[1], [2, 3, 4], [5, 6, 8]]);
      const last = batcher.load(9);
      await sleep(30);
      assert.equal(calls.length, 3);
      await Promise.all([all, last]);
      assert.deepEqual(calls.at(-1), [9]);
    });

    it('bounds the calls of keys that trickle in by burst + perSecond × the time they took', async () => {
      const budget = { burst: 2, perSecond: 20 };
      const { batcher, calls } = recordingBatcher({ windowMs: 1, callBudget: budget });
      const started = performance.now();
      const loads: Promise<Map<number, Outcome<string>>>[] = [];
      for (let key = 1; key <= 100; key++) {
        loads.push(batcher.loadMany([key]));
        await sleep(2);
      }
      const answered = (await Promise.all(loads)).filter((outcomes) => outcomes.size === 1);
      const seconds = (performance.now() - started) / 1000;
      assert.equal(answered.length, 100);
      assert.deepEqual(
        calls.flat().sort((a, b) => a - b),
        Array.from({ length: 100 }, (_, i) => i + 1),
      );
      // The bound holds however slowly the machine ran; without a budget this is one call a window.
      assert.ok(
        calls.length <= budget.burst + Math.ceil(budget.perSecond * seconds) + 1,
        `${calls.length} calls in ${seconds.toFixed(2)} s`,
      );
    });
  });
});
