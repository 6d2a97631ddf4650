import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { InvalidInputError } from '../errors.ts';
import { SourceRateLimiter } from './rate-limit.ts';

describe('SourceRateLimiter', () => {
  test('allows a burst, then refuses with the seconds until the next token', () => {
    let now = 0;
    const limiter = new SourceRateLimiter({ burst: 3, ratePerSecond: 0.5 }, () => now);
    for (let i = 0; i < 3; i++) assert.deepEqual(limiter.take('10.0.0.1'), { allowed: true });
    assert.deepEqual(limiter.take('10.0.0.1'), { allowed: false, retryAfterSeconds: 2 });
    now = 2000;
    assert.deepEqual(limiter.take('10.0.0.1'), { allowed: true });
    assert.equal(limiter.take('10.0.0.1').allowed, false);
  });

  test('sources are limited independently', () => {
    const limiter = new SourceRateLimiter({ burst: 1, ratePerSecond: 1 }, () => 0);
    assert.equal(limiter.take('a').allowed, true);
    assert.equal(limiter.take('a').allowed, false);
    assert.equal(limiter.take('b').allowed, true);
  });

  test('tracks at most maxSources, dropping idle ones first', () => {
    let now = 0;
    const limiter = new SourceRateLimiter({ burst: 2, ratePerSecond: 1, maxSources: 3 }, () => now);
    limiter.take('idle');
    now = 5000;
    limiter.take('busy-1');
    limiter.take('busy-1');
    limiter.take('busy-2');
    limiter.take('new');
    assert.equal(limiter.size, 3);
    // busy-1 kept its (empty) bucket: evicting it would have handed a flooding source a fresh burst.
    assert.equal(limiter.take('busy-1').allowed, false);
  });

  test('refuses nonsensical limits', () => {
    assert.throws(() => new SourceRateLimiter({ burst: 0, ratePerSecond: 1 }), InvalidInputError);
    assert.throws(() => new SourceRateLimiter({ burst: 1, ratePerSecond: 0 }), InvalidInputError);
  });
});
