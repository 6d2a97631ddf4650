import assert from 'node:assert/strict';
import { test } from 'node:test';
import { bounded, withDeadline } from '../deadline.ts';
import { TimeoutError } from '../errors.ts';
import { maxTimerMs, sleep, systemClock } from './clock.ts';

const dayMs = 86_400_000;

test('a wait longer than 2^31-1 ms does not end at once (Node fires such a timer after 1 ms)', async () => {
  let fired = 0;
  const cancel = systemClock.setTimer(() => fired++, maxTimerMs + 1);
  const stop = new AbortController();
  const slept = sleep(systemClock, 30 * dayMs, stop.signal).then(() => fired++);
  let answer = (): void => undefined;
  const call = new Promise<void>((resolve) => {
    answer = resolve;
  });
  const calls = [
    withDeadline(call, 30 * dayMs, 'a 30-day call'),
    bounded(() => call, 30 * dayMs, 'a 30-day call', stop.signal),
  ].map((waiting) => waiting.catch((err: unknown) => assert.ok(!(err instanceof TimeoutError), String(err))));
  await new Promise((resolve) => setTimeout(resolve, 100));
  assert.equal(fired, 0);
  cancel();
  answer();
  stop.abort();
  await Promise.all([slept, ...calls]);
});

test('a wait longer than 2^31-1 ms ends when it is due, in chunks the timers take; cancelled, never', (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const fired: string[] = [];
  systemClock.setTimer(() => fired.push('long'), 2 * maxTimerMs + 5);
  const cancel = systemClock.setTimer(() => fired.push('cancelled'), 2 * maxTimerMs + 5);
  // One chunk a tick: the mock times a timer set during a tick from the tick's end.
  t.mock.timers.tick(maxTimerMs);
  cancel();
  t.mock.timers.tick(maxTimerMs);
  t.mock.timers.tick(4);
  assert.deepEqual(fired, []);
  t.mock.timers.tick(1);
  assert.deepEqual(fired, ['long']);
});
