import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Registry } from 'prom-client';
import { RateLimitedError } from '../errors.ts';
import { type Logger, silentLogger } from '../log.ts';
import { FakeClock, settle } from '../testing/fake-clock.ts';
import { capturedLogger } from '../testing/log-capture.ts';
import { WorkQueue } from './workqueue.ts';

/** A handler whose runs the test completes by hand, recording what ran and what overlapped. */
function controlledHandler() {
  const started: string[] = [];
  const running = new Map<string, () => void>();
  let maxConcurrent = 0;
  let sameKeyOverlap = false;
  const failNext = new Set<string>();
  const handler = (key: string, signal: AbortSignal) =>
    new Promise<void>((resolve, reject) => {
      if (running.has(key)) sameKeyOverlap = true;
      started.push(key);
      const finish = () => {
        running.delete(key);
        if (failNext.delete(key)) reject(new Error(`${key} failed`));
        else resolve();
      };
      running.set(key, finish);
      signal.addEventListener('abort', finish, { once: true });
      maxConcurrent = Math.max(maxConcurrent, running.size);
    });
  return {
    handler,
    started,
    running,
    failNext,
    finish: async (key: string) => {
      running.get(key)?.();
      await settle();
    },
    stats: () => ({ maxConcurrent, sameKeyOverlap }),
  };
}

async function metricValue(registry: Registry, name: string, queue: string): Promise<number | undefined> {
  const metric = registry.getSingleMetric(name);
  const data = await metric?.get();
  return data?.values.find((v) => v.labels['name'] === queue && !('le' in v.labels))?.value;
}

describe('work queue', () => {
  test('a key queued while queued is processed once', async () => {
    const queue = new WorkQueue({ name: 'dedupe', clock: new FakeClock() });
    for (const key of ['a', 'b', 'a', 'a', 'b']) queue.add(key);
    assert.equal(queue.length, 2);
    const h = controlledHandler();
    queue.start(h.handler);
    await settle();
    await h.finish('a');
    await h.finish('b');
    assert.deepEqual(h.started, ['a', 'b']);
    assert.equal(queue.length, 0);
  });

  test('a key re-added while processing runs again afterwards, never concurrently', async () => {
    const queue = new WorkQueue({ name: 'readd', concurrency: 4, clock: new FakeClock() });
    const h = controlledHandler();
    queue.start(h.handler);
    queue.add('a');
    await settle();
    queue.add('a');
    queue.add('a');
    await settle();
    assert.deepEqual(h.started, ['a'], 'not started a second time while the first run is going');
    await h.finish('a');
    assert.deepEqual(h.started, ['a', 'a']);
    await h.finish('a');
    assert.deepEqual(h.started, ['a', 'a']);
    assert.equal(h.stats().sameKeyOverlap, false);
  });

  test('never more than `concurrency` keys at once', async () => {
    const queue = new WorkQueue({ name: 'limit', concurrency: 3, clock: new FakeClock() });
    const h = controlledHandler();
    queue.start(h.handler);
    for (let i = 0; i < 10; i++) queue.add(`k${i}`);
    await settle();
    assert.equal(queue.inProgress, 3);
    assert.equal(queue.length, 7);
    for (let i = 0; i < 10; i++) await h.finish(`k${i}`);
    assert.equal(h.started.length, 10);
    assert.equal(h.stats().maxConcurrent, 3);
    assert.equal(queue.inProgress, 0);
  });

  test('failures back off exponentially up to the cap; forget resets', async () => {
    const clock = new FakeClock();
    const queue = new WorkQueue({ name: 'backoff', baseDelayMs: 10, maxDelayMs: 100, clock });
    assert.deepEqual(
      [0, 1, 2, 3, 4, 5].map((n) => queue.backoffFor(n)),
      [10, 20, 40, 80, 100, 100],
    );
    const h = controlledHandler();
    queue.start(h.handler);
    queue.add('x');
    const retryTimes: number[] = [];
    const start = clock.now();
    for (let attempt = 0; attempt < 4; attempt++) {
      await settle();
      retryTimes.push(clock.now() - start);
      h.failNext.add('x');
      await h.finish('x');
      assert.equal(queue.numRequeues('x'), attempt + 1);
      // Not retried a moment before its backoff ends, retried exactly when it does.
      await clock.advance(queue.backoffFor(attempt) - 1);
      assert.equal(h.started.length, attempt + 1);
      await clock.advance(1);
      assert.equal(h.started.length, attempt + 2);
    }
    assert.deepEqual(retryTimes, [0, 10, 30, 70]);
    await h.finish('x');
    assert.equal(queue.numRequeues('x'), 0, 'success forgets the failures');
    queue.addRateLimited('y');
    queue.forget('y');
    assert.equal(queue.numRequeues('y'), 0);
  });

  test("a failure's log line names the item (a node, a CSR): the logger's redaction of key fields must not hide it", async () => {
    const { logger, lines } = capturedLogger();
    const queue = new WorkQueue({ name: 'nodes', clock: new FakeClock(), logger });
    const h = controlledHandler();
    queue.start(h.handler);
    queue.add('i-0123456789abcdef0');
    await settle();
    h.failNext.add('i-0123456789abcdef0');
    await h.finish('i-0123456789abcdef0');
    const record = JSON.parse(lines.find((line) => line.includes('processing failed')) ?? '{}') as Record<
      string,
      unknown
    >;
    assert.equal(record['item'], 'i-0123456789abcdef0');
    assert.doesNotMatch(lines.join(''), /\[redacted\]/);
    await queue.shutdown();
  });

  test('a name of megabytes (no API server sends one; a broken answer may) is logged cut short', async () => {
    const { logger, lines } = capturedLogger();
    const queue = new WorkQueue({ name: 'csrs', clock: new FakeClock(), logger });
    const h = controlledHandler();
    queue.start(h.handler);
    const huge = `csr-${'x'.repeat(1_000_000)}`;
    queue.add(huge);
    await settle();
    h.failNext.add(huge);
    await h.finish(huge);
    const line = lines.find((l) => l.includes('processing failed')) ?? '{}';
    assert.equal((JSON.parse(line) as { item?: string }).item, `csr-${'x'.repeat(252)}…`);
    await queue.shutdown();
  });

  test('a failure whose answer asked Retry-After is retried no sooner than that, capped at the longest delay', async () => {
    const clock = new FakeClock();
    const queue = new WorkQueue({ name: 'retry-after', baseDelayMs: 10, maxDelayMs: 5_000, clock });
    // A 429 asking for 2 s, then one asking for an hour, then success.
    const failures = [2, 3_600].map(
      (seconds) =>
        new RateLimitedError('patch node x: HTTP 429', { upstreamStatus: 429, retryAfterSeconds: seconds }),
    );
    const startedAt: number[] = [];
    const start = clock.now();
    queue.start(async () => {
      startedAt.push(clock.now() - start);
      const failure = failures.shift();
      if (failure) throw failure;
    });
    queue.add('x');
    try {
      await settle();
      await clock.advance(1_999);
      assert.equal(startedAt.length, 1, 'not retried on the 10 ms backoff');
      await clock.advance(1);
      assert.equal(startedAt.length, 2, 'retried once the 2 s asked for have passed');
      await clock.advance(4_999);
      assert.equal(startedAt.length, 2);
      await clock.advance(1);
      assert.deepEqual(startedAt, [0, 2_000, 7_000], 'the hour asked for is cut to the 5 s cap');
    } finally {
      await queue.shutdown({ drain: false });
    }
  });

  test('addAfter keeps the earliest of several delays', async () => {
    const clock = new FakeClock();
    const queue = new WorkQueue({ name: 'after', clock });
    const h = controlledHandler();
    queue.start(h.handler);
    queue.addAfter('k', 100);
    queue.addAfter('k', 50);
    queue.addAfter('k', 70);
    await clock.advance(49);
    assert.equal(h.started.length, 0);
    await clock.advance(1);
    assert.deepEqual(h.started, ['k']);
    await h.finish('k');
    await clock.advance(100);
    assert.deepEqual(h.started, ['k'], 'the later delays were dropped');
  });

  test('shutdown with drain processes what is queued, then ignores adds', async () => {
    const clock = new FakeClock();
    const queue = new WorkQueue({ name: 'drain', clock });
    const h = controlledHandler();
    queue.start(h.handler);
    queue.add('a');
    queue.add('b');
    queue.addAfter('later', 10);
    await settle();
    let done = false;
    const shutdown = queue.shutdown({ drain: true }).then(() => (done = true));
    queue.add('c');
    await h.finish('a');
    assert.equal(done, false);
    await h.finish('b');
    await shutdown;
    await clock.advance(20);
    assert.deepEqual(h.started, ['a', 'b']);
  });

  test('shutdown without drain aborts running work and drops the queue', async () => {
    const queue = new WorkQueue({ name: 'abort', clock: new FakeClock() });
    const h = controlledHandler();
    queue.start(h.handler);
    queue.add('a');
    queue.add('b');
    await settle();
    await queue.shutdown({ drain: false });
    assert.deepEqual(h.started, ['a']);
    assert.equal(queue.length, 0);
    assert.equal(queue.inProgress, 0);
  });

  test('work the shutdown cuts short is no failure: nothing retried, counted or warned about', async () => {
    const registry = new Registry();
    const warnings: string[] = [];
    const logger = {
      ...silentLogger,
      warn: (_: unknown, message: string) => warnings.push(message),
      child: () => logger,
    } as unknown as Logger;
    const queue = new WorkQueue({ name: 'cut', clock: new FakeClock(), registry, logger });
    const h = controlledHandler();
    queue.start(h.handler);
    h.failNext.add('a'); // rejects when aborted, as a reconcile whose call was cut off does
    queue.add('a');
    await settle();
    await queue.shutdown({ drain: false });
    assert.equal(await metricValue(registry, 'workqueue_retries_total', 'cut'), undefined, 'no retry');
    assert.deepEqual(warnings, []);
  });

  test('keys back after a delay (retries, re-checks) wait behind keys added meanwhile; one added again moves ahead', async () => {
    const clock = new FakeClock();
    const queue = new WorkQueue({ name: 'lines', concurrency: 1, baseDelayMs: 5, clock });
    const h = controlledHandler();
    queue.start(h.handler);
    queue.add('busy');
    await settle();
    queue.addRateLimited('retry');
    queue.addAfter('recheck', 10);
    queue.addAfter('promoted', 10);
    await clock.advance(10);
    assert.equal(queue.length, 3);
    queue.add('new');
    queue.add('promoted');
    assert.equal(queue.length, 4, 'a key moved ahead is still one key');
    for (const key of ['busy', 'new', 'promoted', 'retry', 'recheck']) await h.finish(key);
    assert.deepEqual(h.started, ['busy', 'new', 'promoted', 'retry', 'recheck']);
    assert.equal(queue.length, 0);
    await clock.advance(100);
    assert.equal(h.started.length, 5, 'the key moved ahead is not processed a second time');
    await queue.shutdown();
  });

  test('a key back after its delay is announced as it comes due (onRequeue), so the work of keys due together can be shared', async () => {
    const clock = new FakeClock();
    const due: [string, number][] = [];
    const queue = new WorkQueue({
      name: 'announced',
      baseDelayMs: 10,
      clock,
      onRequeue: (key) => due.push([key, clock.monotonic()]),
    });
    queue.addAfter('recheck', 100);
    queue.addRateLimited('retry');
    const announcedFirst: boolean[] = [];
    queue.start(async (key) => {
      announcedFirst.push(due.some(([announced]) => announced === key));
    });
    queue.add('fresh');
    await clock.advance(99);
    assert.deepEqual(due, [['retry', 10]]);
    await clock.advance(1);
    assert.deepEqual(due, [
      ['retry', 10],
      ['recheck', 100],
    ]);
    assert.deepEqual(announcedFirst, [false, true, true], 'announced before a worker takes them');
    await queue.shutdown();
  });

  test('failures are logged once per cause and ten minutes, with the count held back, not per key and attempt', async () => {
    const clock = new FakeClock();
    const { logger, lines } = capturedLogger();
    const queue = new WorkQueue({
      name: 'nodes',
      concurrency: 100,
      baseDelayMs: 1_000,
      maxDelayMs: 60_000,
      clock,
      logger,
    });
    let storeDown = false;
    queue.start(async (key) => {
      if (storeDown && key === 'node-7') {
        storeDown = false;
        throw new Error('the state store is down');
      }
      // The API server's answer names the node: still one cause.
      throw new Error(`patch node ${key}: HTTP 503: the node ${key} cannot be patched now`);
    });
    const failed = () =>
      lines
        .filter((l) => l.includes('processing failed'))
        .map((l) => JSON.parse(l) as Record<string, unknown>);
    for (let i = 0; i < 100; i++) queue.add(`node-${i}`);
    await settle();
    assert.equal(failed().length, 1, '100 nodes failing on one cause: one line');
    assert.equal(failed()[0]?.['level'], 'warn');
    assert.equal(failed()[0]?.['item'], 'node-0');
    assert.equal(failed()[0]?.['err'], 'patch node <item>: HTTP 503: the node <item> cannot be patched now');
    await clock.advance(120_000);
    assert.equal(failed().length, 1, 'their retries write nothing more within ten minutes');
    storeDown = true;
    await clock.advance(60_000);
    assert.equal(failed().length, 2, 'another cause is written at once');
    assert.equal(failed()[1]?.['err'], 'the state store is down');
    await clock.advance(600_000);
    const lastLines = failed();
    assert.equal(lastLines.length, 3, 'the first cause again after ten minutes, once');
    const again = lastLines[2] ?? {};
    assert.match(String(again['err']), /^patch node <item>/);
    assert.ok(Number(again['repeated']) > 500, `the failures held back are counted: ${again['repeated']}`);
    await queue.shutdown({ drain: false });
  });

  test('past 32 different causes, the others share one line per ten minutes', async () => {
    const clock = new FakeClock();
    const { logger, lines } = capturedLogger();
    const queue = new WorkQueue({ name: 'csrs', concurrency: 100, baseDelayMs: 60_000, clock, logger });
    queue.start(async (key) => {
      throw new Error(`webhook answered request ${key.length * 7919}-${key}x`);
    });
    for (let i = 0; i < 100; i++) queue.add(`csr-${i}`);
    await settle();
    const failed = lines.filter((l) => l.includes('processing failed'));
    assert.equal(failed.length, 33);
    const overflow = JSON.parse(failed[32] ?? '{}') as Record<string, unknown>;
    assert.equal(overflow['err'], 'failures of more than 32 different causes');
    assert.match(String(overflow['example']), /^webhook answered request/);
    await queue.shutdown({ drain: false });
  });

  test('reports depth, adds, retries, durations and the longest-running key', async () => {
    const clock = new FakeClock();
    const registry = new Registry();
    const queue = new WorkQueue({ name: 'metered', clock, registry, baseDelayMs: 1000 });
    const other = new WorkQueue({ name: 'other', clock, registry });
    other.add('z');
    for (const key of ['a', 'b', 'a']) queue.add(key);
    assert.equal(await metricValue(registry, 'workqueue_depth', 'metered'), 2);
    assert.equal(await metricValue(registry, 'workqueue_adds_total', 'metered'), 3);
    assert.equal(await metricValue(registry, 'workqueue_depth', 'other'), 1);

    const h = controlledHandler();
    queue.start(h.handler);
    await settle();
    await clock.advance(2500);
    assert.equal(await metricValue(registry, 'workqueue_longest_running_processor_seconds', 'metered'), 2.5);
    h.failNext.add('a');
    await h.finish('a');
    assert.equal(await metricValue(registry, 'workqueue_retries_total', 'metered'), 1);
    assert.equal(await metricValue(registry, 'workqueue_depth', 'metered'), 0);
    await h.finish('b');
    assert.equal(await metricValue(registry, 'workqueue_longest_running_processor_seconds', 'metered'), 0);
    const work = await registry.getSingleMetricAsString('workqueue_work_duration_seconds');
    assert.match(work, /^workqueue_work_duration_seconds_count\{name="metered"\} 2$/m);
    assert.match(
      work,
      /^workqueue_work_duration_seconds_sum\{name="metered"\} 2\.5$/m,
      'a took 2.5 s, b none',
    );
  });
});
