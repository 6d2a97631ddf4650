import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { TokenBucket } from './token-bucket.ts';

describe('TokenBucket', () => {
  it('allows the burst at once, then regains perSecond, never above the burst', () => {
    const bucket = new TokenBucket({ burst: 2, perSecond: 4 }, 0);
    assert.equal(bucket.tryTake(0), true);
    assert.equal(bucket.tryTake(0), true);
    assert.equal(bucket.tryTake(0), false, 'the burst is spent');
    assert.equal(bucket.msUntilToken(0), 250);
    assert.equal(bucket.msUntilToken(100), 150);
    assert.equal(bucket.tokens(125), 0.5, 'half a token back after half the interval');
    assert.equal(bucket.tryTake(250), true);
    assert.equal(bucket.isFull(250), false);
    assert.equal(bucket.isFull(10_000), true);
    assert.equal(bucket.tokens(10_000), 2);
    assert.equal(bucket.tryTake(10_000), true);
    assert.equal(bucket.tryTake(10_000), true);
    assert.equal(bucket.tryTake(10_000), false, 'a long idle time refills only up to the burst');
  });

  it('does not refill when the clock goes backwards', () => {
    const bucket = new TokenBucket({ burst: 1, perSecond: 1 }, 1_000);
    assert.equal(bucket.tryTake(1_000), true);
    assert.equal(bucket.tryTake(500), false);
    assert.equal(bucket.msUntilToken(500), 1_000);
  });
});
