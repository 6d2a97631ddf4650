import assert from 'node:assert/strict';
import { test } from 'node:test';
import { retryAfterSeconds } from './retry-after.ts';

// The parser's other cases are shown with the answers that carry it (src/agent/http-answer.test.ts).
test('Retry-After: a run of digits too long to be a safe integer is undefined, not Infinity or a rounded number', () => {
  // The fuzzing campaign's reproducer (tmp/fuzz-s11) was 400 digits.
  for (const value of ['1'.repeat(400), '9007199254740993']) {
    assert.equal(retryAfterSeconds(value), undefined, value);
  }
  assert.equal(retryAfterSeconds('9007199254740991'), Number.MAX_SAFE_INTEGER);
  assert.equal(retryAfterSeconds(' 120 '), 120);
});
