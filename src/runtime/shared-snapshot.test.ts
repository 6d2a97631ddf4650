import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { FakeClock } from '../testing/fake-clock.ts';
import { SharedSnapshot } from './shared-snapshot.ts';

/** A build that counts its calls and finishes only when the test says so. */
function heldBuild() {
  const calls: { resolve: (value: string) => void; reject: (err: Error) => void }[] = [];
  const build = () =>
    new Promise<string>((resolve, reject) => {
      calls.push({ resolve, reject });
    });
  return { build, calls };
}

describe('SharedSnapshot', () => {
  test('a build that never settles is shared for shareMs only: then the next caller builds again, and a late finish replaces no newer value', async () => {
    const clock = new FakeClock();
    const { build, calls } = heldBuild();
    const snapshot = new SharedSnapshot(build, { reuseMs: 1_000, shareMs: 10_000, clock });
    const stuck = snapshot.get();
    await clock.advance(9_999);
    void snapshot.get();
    assert.equal(calls.length, 1, 'still shared within shareMs');
    await clock.advance(1);
    const fresh = snapshot.get();
    assert.equal(calls.length, 2, 'past shareMs a new build starts');
    calls[1]?.resolve('fresh');
    assert.equal(await fresh, 'fresh');
    calls[0]?.resolve('stale');
    assert.equal(await stuck, 'stale', 'its own callers still get what it built');
    assert.equal(await snapshot.get(), 'fresh', 'the late, older build does not replace the newer value');
  });

  test('callers that ask while a build runs share it: one build, one value', async () => {
    const { build, calls } = heldBuild();
    const snapshot = new SharedSnapshot(build, { reuseMs: 1_000, clock: new FakeClock() });
    const waiting = Array.from({ length: 100 }, () => snapshot.get());
    assert.equal(calls.length, 1);
    calls[0]?.resolve('first');
    assert.deepEqual(new Set(await Promise.all(waiting)), new Set(['first']));
    assert.equal(calls.length, 1);
  });

  test('a finished value is reused while younger than reuseMs, counted from when it finished', async () => {
    const clock = new FakeClock();
    const { build, calls } = heldBuild();
    const snapshot = new SharedSnapshot(build, { reuseMs: 1_000, clock });
    const first = snapshot.get();
    await clock.advance(300); // a slow build: the interval starts when it ends
    calls[0]?.resolve('first');
    assert.equal(await first, 'first');
    await clock.advance(999);
    assert.equal(await snapshot.get(), 'first');
    assert.equal(calls.length, 1);
    await clock.advance(1);
    const second = snapshot.get();
    assert.equal(calls.length, 2, 'a new build once the value is reuseMs old');
    calls[1]?.resolve('second');
    assert.equal(await second, 'second');
  });

  test('a build that fails fails every caller waiting on it and is not kept: the next caller builds again', async () => {
    const { build, calls } = heldBuild();
    const snapshot = new SharedSnapshot(build, { reuseMs: 1_000, clock: new FakeClock() });
    const waiting = [snapshot.get(), snapshot.get()];
    calls[0]?.reject(new Error('a worker answered garbage'));
    for (const one of waiting) await assert.rejects(one, /a worker answered garbage/);
    const next = snapshot.get();
    assert.equal(calls.length, 2, 'the clock has not moved, yet the failure is not reused');
    calls[1]?.resolve('recovered');
    assert.equal(await next, 'recovered');
  });

  test('a failed build is not answered with an older value past its interval', async () => {
    const clock = new FakeClock();
    const { build, calls } = heldBuild();
    const snapshot = new SharedSnapshot(build, { reuseMs: 1_000, clock });
    const first = snapshot.get();
    calls[0]?.resolve('old');
    await first;
    await clock.advance(1_000);
    const failing = snapshot.get();
    calls[1]?.reject(new Error('boom'));
    await assert.rejects(failing, /boom/);
    const next = snapshot.get();
    assert.equal(calls.length, 3, 'the stale value is not served in place of the failure');
    calls[2]?.resolve('new');
    assert.equal(await next, 'new');
  });

  test('a build that throws before returning a promise is a rejection, and is not kept', async () => {
    let calls = 0;
    const snapshot = new SharedSnapshot(
      () => {
        calls++;
        if (calls === 1) throw new Error('sync boom');
        return Promise.resolve('fine');
      },
      { reuseMs: 1_000, clock: new FakeClock() },
    );
    await assert.rejects(snapshot.get(), /sync boom/);
    assert.equal(await snapshot.get(), 'fine');
    assert.equal(calls, 2);
  });
});
