import assert from 'node:assert/strict';
import { test } from 'node:test';
import { InvalidInputError } from '../errors.ts';
import { formatDuration, parseDuration } from './duration.ts';

test('parses Go durations and bare seconds', () => {
  assert.equal(parseDuration('15s'), 15_000);
  assert.equal(parseDuration('1m30s'), 90_000);
  assert.equal(parseDuration('500ms'), 500);
  assert.equal(parseDuration('2h'), 7_200_000);
  assert.equal(parseDuration('1.5s'), 1_500);
  assert.equal(parseDuration(10), 10_000);
  assert.equal(parseDuration('10'), 10_000);
  assert.equal(parseDuration('0'), 0);
});

test('rejects malformed durations', () => {
  for (const bad of ['', 's', '10x', '5s junk', '-1s', 'soon']) {
    assert.throws(() => parseDuration(bad), InvalidInputError, bad);
  }
  assert.throws(() => parseDuration(-1), InvalidInputError);
});

test('formats durations compactly', () => {
  assert.equal(formatDuration(15_000), '15s');
  assert.equal(formatDuration(120_000), '2m');
  assert.equal(formatDuration(3_600_000), '1h');
  assert.equal(formatDuration(250), '250ms');
});
