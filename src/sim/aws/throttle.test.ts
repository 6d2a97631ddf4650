import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ec2NonMutatingBucket, ThrottleBucket } from './throttle.ts';

describe('ThrottleBucket', () => {
  it('allows the capacity at once, then the refill rate', () => {
    let now = 0;
    const bucket = new ThrottleBucket({ ...ec2NonMutatingBucket, now: () => now });
    let taken = 0;
    while (bucket.take()) taken++;
    assert.equal(taken, 100);
    now += 1000;
    taken = 0;
    while (bucket.take()) taken++;
    assert.equal(taken, 20);
    now += 60_000;
    assert.equal(bucket.tokens, 100, 'never more than the capacity');
  });

  it('refills to capacity on reset', () => {
    const bucket = new ThrottleBucket({ capacity: 2, refillPerSecond: 1, now: () => 0 });
    assert.ok(bucket.take() && bucket.take());
    assert.equal(bucket.take(), false);
    bucket.reset();
    assert.equal(bucket.take(), true);
  });
});
