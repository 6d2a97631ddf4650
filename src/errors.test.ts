import assert from 'node:assert/strict';
import { test } from 'node:test';
import { errorForHttpStatus, isFaultStatus, isRetryable } from './errors.ts';

test('errorForHttpStatus: named statuses keep their kind, faults are unavailable, the rest is the caller’s', () => {
  const named: [number, string][] = [
    [400, 'invalid'],
    [401, 'unauthenticated'],
    [403, 'forbidden'],
    [404, 'not-found'],
    [409, 'conflict'],
    [410, 'gone'],
    [422, 'invalid'],
    [429, 'rate-limited'],
    [408, 'unavailable'],
    [500, 'unavailable'],
    [599, 'unavailable'],
  ];
  for (const otherwise of ['invalid', 'unavailable'] as const) {
    for (const [status, kind] of named) {
      const err = errorForHttpStatus(
        status,
        `HTTP ${status}`,
        { details: { httpStatus: status } },
        otherwise,
      );
      assert.equal(err.kind, kind, `${status} with otherwise=${otherwise}`);
      assert.equal(err.message, `HTTP ${status}`);
      assert.deepEqual(err.details, { httpStatus: status });
    }
    for (const status of [301, 405, 413, 415, 600]) {
      assert.equal(errorForHttpStatus(status, 'x', {}, otherwise).kind, otherwise, String(status));
    }
  }
  assert.equal(errorForHttpStatus(404, 'x', {}, 'invalid').name, 'NotFoundError');
});

test('isFaultStatus: 408, 429 and 5xx are "not now"; the rest is an answer', () => {
  for (const status of [408, 429, 500, 503, 599]) assert.equal(isFaultStatus(status), true, String(status));
  for (const status of [200, 301, 400, 404, 413, 600])
    assert.equal(isFaultStatus(status), false, String(status));
  assert.equal(isRetryable(errorForHttpStatus(503, 'x', {}, 'invalid')), true);
});
