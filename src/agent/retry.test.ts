import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  ConflictError,
  ForbiddenError,
  InvalidInputError,
  NotFoundError,
  RateLimitedError,
  TimeoutError,
  UnauthenticatedError,
  UnavailableError,
} from '../errors.ts';
import { createLogger } from '../log.ts';
import { Backoff } from '../runtime/backoff.ts';
import { maxRetryAfterMs, type RetryOptions, retryTransient } from './retry.ts';

/** Fake time: `sleep` records the wait and moves the clock, so nothing really waits. */
function fakeTime(deadlineMs = 3_600_000) {
  let now = 0;
  const waits: number[] = [];
  const options: RetryOptions = {
    deadline: deadlineMs,
    backoff: new Backoff({ initialMs: 1000, maxMs: 30_000, jitter: 0 }),
    what: 'bootstrap request',
    now: () => now,
    sleep: async (ms) => {
      waits.push(ms);
      now += ms;
    },
  };
  return { options, waits };
}

/** An attempt that throws each of `failures` in turn, then answers 'ok'. */
function failing(...failures: Error[]): { attempt: () => Promise<string>; calls: () => number } {
  let calls = 0;
  return {
    attempt: async () => {
      const failure = failures[calls++];
      if (failure) throw failure;
      return 'ok';
    },
    calls: () => calls,
  };
}

const unavailable = (retryAfterSeconds?: number) =>
  new UnavailableError('POST https://h/v1/certificates answered 503 Service Unavailable', {
    details: { httpStatus: 503, retryAfterSeconds },
  });

describe('retryTransient', () => {
  test('each retry shows one line: the progress line, with its log record at debug, not info', async () => {
    const { options } = fakeTime();
    const records: { level: string; msg: string }[] = [];
    const logger = createLogger({
      level: 'debug',
      destination: { write: (line: string) => records.push(JSON.parse(line)) },
    });
    const lines: string[] = [];
    const { attempt } = failing(unavailable(2), unavailable(2));
    await retryTransient(attempt, { ...options, logger, progress: (line) => lines.push(line) });
    assert.equal(lines.length, 2);
    assert.match(lines[0] ?? '', /^bootstrap request: retrying in 2s: /);
    assert.deepEqual(
      records.map((r) => `${r.level} ${r.msg}`),
      ['debug bootstrap request failed; retrying', 'debug bootstrap request failed; retrying'],
    );
    // Without a progress line the log record is the only one, at info.
    records.length = 0;
    await retryTransient(failing(unavailable(2)).attempt, { ...fakeTime().options, logger });
    assert.deepEqual(
      records.map((r) => r.level),
      ['info'],
    );
  });

  test('a 503 with Retry-After is waited out at least as long as it says', async () => {
    const { options, waits } = fakeTime();
    const { attempt, calls } = failing(unavailable(7), unavailable(7), unavailable(2));
    assert.equal(await retryTransient(attempt, options), 'ok');
    // The third answer's 2 s is shorter than the backoff has grown to (1, 2, then 4 s).
    assert.deepEqual(waits, [7000, 7000, 4000]);
    assert.equal(calls(), 4);
  });

  test('a server that names the same short Retry-After all through an outage does not hold the node to it: the backoff grows past it', async () => {
    const { options, waits } = fakeTime();
    const { attempt, calls } = failing(...Array.from({ length: 8 }, () => unavailable(3)));
    assert.equal(await retryTransient(attempt, options), 'ok');
    assert.deepEqual(waits, [3000, 3000, 4000, 8000, 16_000, 30_000, 30_000, 30_000]);
    assert.equal(calls(), 9);
  });

  test('Retry-After is capped at five minutes', async () => {
    const { options, waits } = fakeTime();
    const { attempt } = failing(
      unavailable(86_400),
      new RateLimitedError('slow', { details: { retryAfterSeconds: 301 } }),
    );
    assert.equal(await retryTransient(attempt, options), 'ok');
    assert.deepEqual(waits, [maxRetryAfterMs, maxRetryAfterMs]);
  });

  test('without Retry-After the backoff decides, and it keeps growing across answers that named one', async () => {
    const { options, waits } = fakeTime();
    const { attempt } = failing(
      unavailable(),
      new TimeoutError('no answer within 30000 ms'),
      unavailable(9),
      new RateLimitedError('slow down'),
    );
    assert.equal(await retryTransient(attempt, options), 'ok');
    assert.deepEqual(waits, [1000, 2000, 9000, 8000]);
  });

  test('a permanent answer is thrown at once, never retried', async () => {
    for (const permanent of [
      new NotFoundError('GET https://h/cluster-info answered 404 Not Found'),
      new InvalidInputError('answered 400 Bad Request'),
      new UnauthenticatedError('answered 401 Unauthorized'),
      new ForbiddenError('answered 403 Forbidden'),
      new ConflictError('answered 409 Conflict'),
    ]) {
      const { options, waits } = fakeTime();
      const { attempt, calls } = failing(permanent);
      await assert.rejects(retryTransient(attempt, options), (err) => err === permanent);
      assert.equal(calls(), 1, permanent.message);
      assert.deepEqual(waits, []);
    }
  });

  test('gives up when the next wait would pass the deadline, naming the last fault', async () => {
    const { options, waits } = fakeTime(10_000);
    const { attempt, calls } = failing(unavailable(4), unavailable(4), unavailable(4), unavailable(4));
    await assert.rejects(retryTransient(attempt, options), (err: unknown) => {
      assert.ok(err instanceof TimeoutError);
      assert.equal(
        err.message,
        'bootstrap request: gave up after 8s: POST https://h/v1/certificates answered 503 Service Unavailable',
      );
      return true;
    });
    assert.deepEqual(waits, [4000, 4000]);
    assert.equal(calls(), 3);
  });
});
