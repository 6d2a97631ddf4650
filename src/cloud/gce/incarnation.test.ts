import assert from 'node:assert/strict';
import { test } from 'node:test';
import { UnavailableError } from '../../errors.ts';
import { incarnationOf } from './incarnation.ts';

test('the incarnation of an instance read: its uint64 id and its RFC 3339 creation time, any offset', () => {
  const instance = { name: 'n', zone: 'z', status: 'RUNNING' };
  assert.deepEqual(incarnationOf({ ...instance, id: '18446744073709551615' }), {
    id: '18446744073709551615',
  });
  for (const [written, read] of [
    ['2026-06-27T03:10:47.431-07:00', '2026-06-27T10:10:47.431Z'],
    ['2026-06-27T10:10:47Z', '2026-06-27T10:10:47.000Z'],
    ['2026-06-27T12:10:47.5+02:00', '2026-06-27T10:10:47.500Z'],
  ] as const) {
    const incarnation = incarnationOf({ ...instance, id: '7', creationTimestamp: written });
    assert.ok(!(incarnation instanceof Error));
    assert.equal(incarnation.createdAt?.toISOString(), read, written);
  }
});

test('an answer whose id or creationTimestamp cannot be read is a fault of the answer, never an identity without an incarnation', () => {
  const instance = { name: 'n', zone: 'z', status: 'RUNNING' };
  for (const [malformed, reason] of [
    [{ id: 'abc' }, /the id "abc", not a uint64 in decimal/],
    [{ id: 42 }, /the id 42, not a uint64 in decimal/],
    [{ id: '18446744073709551616' }, /not a uint64/],
    [{}, /the id undefined, not a uint64/],
    [
      { id: '7', creationTimestamp: '27/06/2026' },
      /creationTimestamp is "27\/06\/2026", not a time \(RFC 3339 with an offset\)/,
    ],
    [{ id: '7', creationTimestamp: '2026-02-30T00:00:00Z' }, /not a time \(RFC 3339 with an offset\)/],
    [{ id: '7', creationTimestamp: 1782554000 }, /not a time \(RFC 3339 with an offset\)/],
  ] as const) {
    const result = incarnationOf({ ...instance, ...malformed } as never);
    assert.ok(result instanceof UnavailableError, JSON.stringify(malformed));
    assert.match(result.message, reason);
  }
});
