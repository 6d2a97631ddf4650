import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Backoff } from './backoff.ts';

/** The first `n` delays of a backoff whose random draws are all `draw`. */
function delays(draw: number, n: number, jitter = 0.5): number[] {
  const backoff = new Backoff({ initialMs: 1000, maxMs: 30_000, jitter, random: () => draw });
  return Array.from({ length: n }, () => Math.round(backoff.next()));
}

describe('Backoff', () => {
  test('without jitter the delay doubles from initialMs and stays at maxMs', () => {
    assert.deepEqual(delays(0.7, 8, 0), [1000, 2000, 4000, 8000, 16_000, 30_000, 30_000, 30_000]);
  });

  test('jitter applies after the cap: at the cap clients with different draws still wait different times', () => {
    // A thousand nodes that failed together must not retry every 30 s in step (Kubernetes' wait.Backoff
    // caps the base and then adds the jitter, too).
    const low = delays(0, 8);
    const high = delays(0.99, 8);
    assert.deepEqual(low, [1000, 2000, 4000, 8000, 16_000, 30_000, 30_000, 30_000]);
    assert.deepEqual(high, [1495, 2990, 5980, 11_960, 23_920, 44_850, 44_850, 44_850]);
    assert.notEqual(low[7], high[7]);
  });

  test('the longest wait is maxMs plus its jitter fraction', () => {
    const backoff = new Backoff({ initialMs: 1000, maxMs: 30_000, jitter: 0.5, random: () => 0.999_999 });
    for (let i = 0; i < 20; i++) assert.ok(backoff.next() < 45_000);
  });

  test('reset starts over from initialMs and counts failures again', () => {
    const backoff = new Backoff({ initialMs: 100, maxMs: 1000, jitter: 0, random: () => 0 });
    backoff.next();
    backoff.next();
    assert.equal(backoff.failures, 2);
    backoff.reset();
    assert.equal(backoff.failures, 0);
    assert.equal(backoff.next(), 100);
  });
});
