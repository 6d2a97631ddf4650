import assert from 'node:assert/strict';
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { test } from 'node:test';
import { pino } from 'pino';
import { LogSink, pipeAtomicBytes, type SinkOutput } from './log-sink.ts';

const logModule = JSON.stringify(new URL('./log.ts', import.meta.url).href);
/** A module of this tree, as a child's import names it. */
const moduleUrl = (path: string) => JSON.stringify(new URL(path, import.meta.url).href);

/** A Node process running `body` after `import * as log from './log.ts'` (a namespace: an export it lacks is undefined). */
function child(body: string): ChildProcess {
  const script = `import * as log from ${logModule};\n${body}`;
  return spawn(process.execPath, ['--input-type=module', '-e', script], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

/** What a child wrote: standard output as it comes, standard error once read, and how it ended. */
function watch(process_: ChildProcess) {
  let stdout = '';
  let stderr = '';
  const marks: ((text: string) => void)[] = [];
  process_.stdout?.on('data', (chunk: Buffer) => {
    stdout += chunk;
    for (const mark of marks) mark(stdout);
  });
  process_.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk;
  });
  // 'exit' as the process ends; 'close' once its output has been read to the end too.
  const exited = new Promise<{ code: number | null; at: number }>((resolve) =>
    process_.on('exit', (code) => resolve({ code, at: performance.now() })),
  );
  const ended = new Promise<{ code: number | null }>((resolve) =>
    process_.on('close', (code) => resolve({ code })),
  );
  return {
    exited,
    ended,
    stdout: () => stdout,
    stderr: () => stderr,
    records: () =>
      stderr
        .split('\n')
        .filter((line) => line.startsWith('{'))
        .map((line) => JSON.parse(line) as Record<string, unknown>),
    /** Resolves (with the time) once standard output has printed `text`. */
    printed: (text: string) =>
      new Promise<number>((resolve) => {
        const mark = (out: string) => {
          if (out.includes(text)) resolve(performance.now());
        };
        marks.push(mark);
        mark(stdout);
      }),
  };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A child that logs a 32 KB line every 5 ms for `runMs` while a 10 ms timer measures its event-loop
 * gaps, then prints `{worstGapMs, logged, dropped}`. With `blockingAgain`, it first starts a process
 * that inherits its standard error, which sets the pipe back to blocking writes (as the bootstrap
 * server's workers do when forked).
 */
function bigLineLogger(runMs: number, blockingAgain: boolean): ChildProcess {
  return child(`
    import { spawnSync } from 'node:child_process';
    const logger = log.createLogger({ level: 'info' });
    if (${blockingAgain}) spawnSync('/bin/sh', ['-c', ':'], { stdio: 'inherit' });
    const filler = 'x'.repeat(32 * 1024);
    let last = performance.now();
    let worstGapMs = 0;
    const tick = setInterval(() => {
      const now = performance.now();
      worstGapMs = Math.max(worstGapMs, now - last);
      last = now;
    }, 10);
    let logged = 0;
    const writer = setInterval(() => logger.info({ seq: logged++, filler }, 'big line'), 5);
    process.stdout.write('started\\n');
    setTimeout(() => {
      clearInterval(tick);
      clearInterval(writer);
      const dropped = log.logLinesDropped?.() ?? 0;
      process.stdout.write(JSON.stringify({ worstGapMs: Math.round(worstGapMs), logged, dropped }) + '\\n');
    }, ${runMs});
  `);
}

for (const blockingAgain of [false, true]) {
  test(`a reader of standard error that stops for 2 s stops neither the event loop nor the order of what is logged; what did not fit is dropped, counted and reported${blockingAgain ? ', also after a child process set the pipe blocking again' : ''}`, async () => {
    const logging = bigLineLogger(4_500, blockingAgain);
    const seen = watch(logging);
    await seen.printed('started');
    await sleep(500);
    logging.stderr?.pause();
    await sleep(2_000);
    logging.stderr?.resume();
    const { code } = await seen.ended;
    assert.equal(code, 0);
    const result = JSON.parse(seen.stdout().split('\n')[1] as string) as {
      worstGapMs: number;
      logged: number;
      dropped: number;
    };
    // Synchronous writes stopped the loop for about the whole pause (tmp/volume/log-pipe-stall.out).
    assert.ok(result.worstGapMs < 1_000, `worst event-loop gap ${result.worstGapMs} ms`);
    assert.ok(result.dropped > 0, `dropped ${result.dropped} of ${result.logged}`);
    const records = seen.records();
    const lines = records.filter((r) => r['msg'] === 'big line').map((r) => r['seq'] as number);
    assert.deepEqual(
      lines,
      [...lines].sort((a, b) => a - b),
      'what arrives arrives in order',
    );
    assert.equal(lines.length + result.dropped, result.logged, 'every line arrived or was counted');
    const reports = records.filter((r) => r['droppedLines'] !== undefined);
    assert.ok(reports.length >= 1, 'the drop was reported once the reader read again');
    assert.equal(
      reports.reduce((sum, r) => sum + (r['droppedLines'] as number), 0),
      result.dropped,
    );
    assert.ok(reports.every((r) => r['level'] === 'warn'));
  });
}

test('with the reader reading, every line logged arrives, in order, and none is dropped', async () => {
  const logging = child(`
    const logger = log.createLogger({ level: 'info' });
    const filler = 'y'.repeat(300);
    let seq = 0;
    for (let burst = 0; burst < 40; burst++) {
      for (let i = 0; i < 500; i++) logger.info({ seq: seq++, filler }, 'line');
      await new Promise((resolve) => setImmediate(resolve));
    }
    process.stdout.write(JSON.stringify({ dropped: log.logLinesDropped?.() ?? 0 }) + '\\n');
  `);
  const seen = watch(logging);
  const { code } = await seen.ended;
  assert.equal(code, 0);
  assert.deepEqual(JSON.parse(seen.stdout()), { dropped: 0 });
  const seqs = seen.records().map((r) => r['seq']);
  assert.deepEqual(
    seqs,
    Array.from({ length: 20_000 }, (_, i) => i),
  );
});

/** How the children below end once they have logged. */
const endings = {
  'process.exit(3)': { code: 3, body: 'process.exit(3);' },
  'an uncaught error': { code: 1, body: "throw new Error('boom');" },
  'the end of its event loop': { code: 0, body: '' },
};

for (const [ending, { code: expected, body }] of Object.entries(endings)) {
  test(`lines still waiting for a slow reader are written before the process ends by ${ending}`, async () => {
    // 2 MiB: more than the pipe holds, so most of it waits in the process when it ends.
    const logging = child(`
      const logger = log.createLogger({ level: 'info' });
      const filler = 'z'.repeat(10 * 1024);
      for (let seq = 0; seq < 200; seq++) logger.info({ seq, filler }, 'line');
      process.stdout.write('logged\\n');
      ${body}
    `);
    logging.stderr?.pause();
    const seen = watch(logging);
    // A child that writes synchronously prints 'logged' only once the reader reads: read after 2 s then.
    await Promise.race([seen.printed('logged'), sleep(2_000)]);
    await sleep(300);
    logging.stderr?.resume();
    const { code } = await seen.ended;
    assert.equal(code, expected);
    assert.deepEqual(
      seen
        .records()
        .filter((r) => r['msg'] === 'line')
        .map((r) => r['seq']),
      Array.from({ length: 200 }, (_, i) => i),
    );
  });
}

test('a reader that does not read again holds the exit no longer than the flush bound', async () => {
  const logging = child(`
    const logger = log.createLogger({ level: 'info' });
    process.stdout.write('logging\\n');
    const filler = 'z'.repeat(10 * 1024);
    for (let seq = 0; seq < 400; seq++) logger.info({ seq, filler }, 'line');
    process.exit(0);
  `);
  logging.stderr?.pause();
  const seen = watch(logging);
  const started = await seen.printed('logging');
  // Read again only after 15 s, to end a child that writes synchronously.
  const rescue = setTimeout(() => logging.stderr?.resume(), 15_000);
  const { code, at } = await seen.exited;
  clearTimeout(rescue);
  logging.stderr?.resume();
  assert.equal(code, 0);
  // The bound is 2 s; the rest is a generous margin for a loaded machine.
  assert.ok(at - started < 6_000, `exited ${Math.round(at - started)} ms after it started logging`);
});

test("two processes logging to one pipe that is read late never splice each other's lines", () => {
  // The bootstrap server's serving workers inherit the primary's standard error: one pipe, several
  // writers. A write that the pipe takes only in part leaves the rest of a line for later, and the
  // other process's line lands in between: two broken JSON records, audit records among them.
  const script = `import * as log from ${logModule};
    const logger = log.createLogger({ level: 'info' });
    const who = process.argv.at(-1);
    for (let i = 0; i < 6000; i++) logger.info({ i, who, pad: 'x'.repeat(150 + (i % 97)) }, 'line');
    setTimeout(() => {}, 300);`;
  let spliced = 0;
  for (let round = 0; round < 5 && spliced === 0; round++) {
    // Both share one pipe, whose reader starts late, as a stalled log shipper does.
    const run = spawnSync(
      '/bin/sh',
      [
        '-c',
        '("$NODE" --input-type=module -e "$SCRIPT" A & "$NODE" --input-type=module -e "$SCRIPT" B & wait) 2>&1 >/dev/null | (sleep 0.5; cat)',
      ],
      {
        env: { ...process.env, NODE: process.execPath, SCRIPT: script },
        encoding: 'utf8',
        maxBuffer: 64 * 1024 * 1024,
      },
    );
    assert.equal(run.status, 0, run.stderr);
    const received = { A: 0, B: 0 };
    for (const line of run.stdout.split('\n').filter(Boolean)) {
      try {
        const record = JSON.parse(line) as { who: 'A' | 'B' };
        received[record.who]++;
      } catch {
        spliced++;
      }
    }
    if (spliced === 0) assert.deepEqual(received, { A: 6000, B: 6000 }, 'every line of both arrived');
  }
  assert.equal(spliced, 0, `${spliced} log lines were spliced by the other process's writes`);
});

/**
 * A child that becomes leader with a leader-only component that never stops, logs 2 MiB (more than
 * the pipe holds), then stops: the component overruns its 100 ms stop budget, and the runtime's own
 * fatal exit (code 70) ends the process. A later `exit` listener prints on standard output how long
 * after the stop began the process ended: the 100 ms, and its waits for standard error.
 */
function fatalExit(): ChildProcess {
  return child(`
    import { writeSync } from 'node:fs';
    import { Registry } from 'prom-client';
    import { parseConfig } from ${moduleUrl('./config/loader.ts')};
    import { ControllerRuntime } from ${moduleUrl('./runtime/controller-runtime.ts')};
    import { FakeLeaseApi } from ${moduleUrl('./testing/fake-lease-api.ts')};
    const logger = log.createLogger({ level: 'info' });
    const runtime = new ControllerRuntime({
      config: parseConfig({
        clusterName: 'c.example.com',
        cloud: 'metal',
        metrics: { listen: '127.0.0.1:0' },
        leaderElection: {},
      }),
      leaseClient: new FakeLeaseApi().clientFor(),
      components: [{ name: 'stubborn', start: () => new Promise(() => {}) }],
      registry: new Registry(),
      identity: 'a',
      componentStopTimeoutMs: 100,
      logger,
    });
    await runtime.start();
    while (!runtime.isLeader) await new Promise((resolve) => setTimeout(resolve, 10));
    const filler = 'z'.repeat(10 * 1024);
    for (let seq = 0; seq < 200; seq++) logger.info({ seq, filler }, 'line');
    process.stdout.write('logged\\n');
    const stopping = performance.now();
    process.on('exit', () => writeSync(1, JSON.stringify({ waitedMs: Math.round(performance.now() - stopping) }) + '\\n'));
    void runtime.stop();
  `);
}

/** How long a child of {@link fatalExit} said its exit waited for standard error. */
function exitWait(stdout: string): number {
  const report = stdout.split('\n').find((line) => line.startsWith('{'));
  assert.ok(report, `the exit listener ran: ${stdout}`);
  return (JSON.parse(report) as { waitedMs: number }).waitedMs;
}

test('a fatal exit (a leader-only component that does not stop) prints its reason after every log line still waiting for a slow reader', async () => {
  const logging = fatalExit();
  logging.stderr?.pause();
  const seen = watch(logging);
  // A child that waits with no bound would wait for ever.
  const kill = setTimeout(() => logging.kill('SIGKILL'), 20_000);
  await seen.printed('logged');
  // The reader reads again within the exit's bound (2 s).
  await sleep(800);
  logging.stderr?.resume();
  const { code } = await seen.ended;
  clearTimeout(kill);
  assert.equal(code, 70);
  const lines = seen.stderr().trimEnd().split('\n');
  assert.match(
    lines.at(-1) as string,
    /^kops-controller: leader-only component stubborn did not stop within \d+ ms/,
  );
  const records = seen.records();
  assert.equal(records.at(-1)?.['msg'], 'exiting', 'the fatal record, then the reason');
  assert.deepEqual(
    records.filter((r) => r['msg'] === 'line').map((r) => r['seq']),
    Array.from({ length: 200 }, (_, i) => i),
  );
});

test('a fatal exit waits for a reader that does not read once, no longer than the flush bound', async () => {
  const logging = fatalExit();
  logging.stderr?.pause();
  const seen = watch(logging);
  await seen.printed('logged');
  // Read again only after 15 s, to end a child that would wait for the reader (20 s: for ever).
  const rescue = setTimeout(() => logging.stderr?.resume(), 15_000);
  const kill = setTimeout(() => logging.kill('SIGKILL'), 20_000);
  const { code } = await seen.exited;
  clearTimeout(rescue);
  clearTimeout(kill);
  logging.stderr?.resume();
  assert.equal(code, 70);
  // Measured by the child, from the stop to its last exit listener: the bound is 2 s after 100 ms,
  // and two waits (a flush before the reason, then the exit's) take twice that.
  const waited = exitWait(seen.stdout());
  assert.ok(waited < 3_000, `the exit waited ${waited} ms for standard error`);
  const lines = seen.stderr().trimEnd().split('\n');
  const reason = lines.findIndex((line) => line.startsWith('kops-controller: '));
  assert.ok(reason === -1 || reason === lines.length - 1, 'the reason, if the reader got it, comes last');
});

/** A child that logs 2 MiB (more than the pipe holds), then runs a command that fails (exit 78: no config file). */
function failingCommand(): ChildProcess {
  return child(`
    import { main } from ${moduleUrl('./cli/main.ts')};
    const logger = log.createLogger({ level: 'info' });
    const filler = 'z'.repeat(10 * 1024);
    for (let seq = 0; seq < 200; seq++) logger.info({ seq, filler }, 'line');
    process.stdout.write('logged\\n');
    process.exitCode = await main(['run', '--conf=/nonexistent/kops-controller.yaml']);
  `);
}

test("a failed command's error line comes after its log lines, and a reader that does not read holds its exit no longer than the exit's bounds", async () => {
  const logging = failingCommand();
  logging.stderr?.pause();
  const seen = watch(logging);
  const started = await seen.printed('logged');
  const rescue = setTimeout(() => logging.stderr?.resume(), 15_000);
  const { code, at } = await seen.exited;
  clearTimeout(rescue);
  logging.stderr?.resume();
  await seen.ended;
  assert.equal(code, 78);
  // The bounds: the error line waits for nothing, the exit grace is 2 s and the exit's flush 2 s;
  // the rest is a generous margin for a loaded machine.
  assert.ok(at - started < 8_000, `exited ${Math.round(at - started)} ms after it logged`);
  const lines = seen.stderr().trimEnd().split('\n');
  const error = lines.findIndex((line) => line.startsWith('kops-controller: '));
  assert.ok(
    error === -1 || error === lines.length - 1,
    `the error line, if the reader got it, comes last: ${lines.at(-1)?.slice(0, 100)}`,
  );
});

test("a failed command's error line comes after its log lines still waiting for a slow reader", async () => {
  const logging = failingCommand();
  logging.stderr?.pause();
  const seen = watch(logging);
  await seen.printed('logged');
  await sleep(800);
  logging.stderr?.resume();
  const { code } = await seen.ended;
  assert.equal(code, 78);
  const lines = seen.stderr().trimEnd().split('\n');
  assert.match(lines.at(-1) as string, /^kops-controller: .*nonexistent/);
  assert.deepEqual(
    seen
      .records()
      .filter((r) => r['msg'] === 'line')
      .map((r) => r['seq']),
    Array.from({ length: 200 }, (_, i) => i),
  );
});

/** A destination that takes `capacity` more bytes (0: a stalled reader), on a clock the test moves. */
function fakeOutput() {
  let now = 0;
  let timers: { at: number; retry: () => void }[] = [];
  const fake = {
    capacity: Number.POSITIVE_INFINITY,
    refuse: undefined as string | undefined,
    writes: 0,
    /** The bytes of each write handed over, line by line. */
    batches: [] as number[][],
    /** How long each wait of a flush was. */
    slept: [] as number[],
    /** When a stalled reader (capacity 0) reads again. */
    opensAt: undefined as number | undefined,
    taken: '',
    advance(ms: number) {
      const until = now + ms;
      for (;;) {
        const due = timers.filter((t) => t.at <= until).sort((a, b) => a.at - b.at)[0];
        if (!due) break;
        timers = timers.filter((t) => t !== due);
        now = Math.max(now, due.at);
        due.retry();
      }
      now = until;
    },
    output: {
      writev(buffers) {
        fake.writes++;
        fake.batches.push(buffers.map((b) => b.length));
        if (fake.refuse) throw Object.assign(new Error(fake.refuse), { code: fake.refuse });
        if (fake.opensAt !== undefined && now >= fake.opensAt) {
          fake.capacity = Number.POSITIVE_INFINITY;
          fake.opensAt = undefined;
        }
        const all = Buffer.concat(buffers);
        const n = Math.min(all.length, fake.capacity);
        if (n === 0) throw Object.assign(new Error('EAGAIN'), { code: 'EAGAIN' });
        fake.capacity -= n;
        fake.taken += all.subarray(0, n).toString();
        return n;
      },
      later(retry, ms) {
        timers.push({ at: now + ms, retry });
      },
      sleep(ms) {
        fake.slept.push(ms);
        // A wait of no length (NaN, Infinity) would never end: the real sleep's Atomics.wait waits for ever.
        if (!Number.isFinite(ms) || ms < 0) throw new RangeError(`slept ${ms} ms`);
        now += ms;
      },
      now: () => now,
    } satisfies SinkOutput,
    get now() {
      return now;
    },
  };
  return fake;
}

test('lines a stalled reader does not take wait, in order, up to the bound; the rest are dropped, counted, and reported once it reads again', () => {
  const fake = fakeOutput();
  const sink = new LogSink(fake.output, { maxBufferedBytes: 60 });
  const reports: number[] = [];
  sink.reportDropsWith((dropped) => {
    reports.push(dropped);
    sink.write(`dropped ${dropped}\n`);
  });
  fake.capacity = 30; // takes most of the first line, then nothing
  for (const name of ['one', 'two', 'three', 'four']) sink.write(`${name.padEnd(40, '.')}\n`);
  assert.equal(fake.taken, 'one'.padEnd(30, '.'));
  assert.equal(sink.buffered, 11 + 41, 'the rest of the first line and the second wait');
  assert.equal(sink.dropped, 2, 'the third and fourth did not fit');
  fake.advance(1_000); // still stalled: tried again, nothing taken, nothing reported
  assert.deepEqual(reports, []);
  fake.capacity = Number.POSITIVE_INFINITY;
  fake.advance(100);
  assert.equal(fake.taken, `${'one'.padEnd(40, '.')}\n${'two'.padEnd(40, '.')}\ndropped 2\n`);
  assert.deepEqual(reports, [2]);
  assert.equal(sink.buffered, 0);
  sink.write('five\n');
  assert.ok(
    fake.taken.endsWith('dropped 2\nfive\n'),
    'written at once, with no report: nothing new was dropped',
  );
  assert.deepEqual(reports, [2]);
  assert.equal(sink.dropped, 2, 'the count stays: a counter');
});

test('a flush waits for a stalled reader no longer than its bound, and writes everything once it reads', () => {
  const fake = fakeOutput();
  const sink = new LogSink(fake.output);
  fake.capacity = 0;
  sink.write('held\n');
  assert.equal(sink.flushSync(2_000), false);
  assert.equal(fake.now, 2_000);
  assert.equal(sink.buffered, 5);
  fake.capacity = Number.POSITIVE_INFINITY;
  assert.equal(sink.flushSync(0), true);
  assert.equal(fake.taken, 'held\n');
});

test('once the process exits, a line logged is written before the next exit handler runs, within the bound', () => {
  const fake = fakeOutput();
  const sink = new LogSink(fake.output);
  fake.capacity = 0;
  sink.write('before\n');
  fake.capacity = 7; // the reader takes the first line while the exit flush waits
  sink.flushAtExit(2_000);
  assert.equal(fake.taken, 'before\n');
  fake.capacity = Number.POSITIVE_INFINITY;
  sink.write('in an exit handler\n');
  assert.equal(fake.taken, 'before\nin an exit handler\n', 'no timer runs after exit: written at once');
});

test('a reader gone for good (EPIPE) costs the lines, counted, and is not written to again', () => {
  const fake = fakeOutput();
  const sink = new LogSink(fake.output);
  const reports: number[] = [];
  sink.reportDropsWith((dropped) => reports.push(dropped));
  fake.refuse = 'EPIPE';
  sink.write('lost\n');
  sink.write('lost too\n');
  assert.equal(sink.dropped, 2);
  assert.equal(fake.writes, 1);
  assert.equal(sink.flushSync(1_000), true, 'nothing is held for it');
  assert.deepEqual(reports, [], 'nobody would read the report');
});

test('each write hands the pipe whole lines of at most PIPE_BUF bytes in all, and a longer line alone', () => {
  const fake = fakeOutput();
  const sink = new LogSink(fake.output);
  fake.capacity = 0;
  const lines = [1000, 1000, 1000, 1000, 96, 5000, 10, 4096, 4095, 1, 1];
  for (const [i, length] of lines.entries()) sink.write(`${String(i % 10).repeat(length - 1)}\n`);
  fake.capacity = Number.POSITIVE_INFINITY;
  fake.batches = [];
  assert.equal(sink.flushSync(0), true);
  assert.deepEqual(fake.batches, [[1000, 1000, 1000, 1000, 96], [5000], [10], [4096], [4095, 1], [1]]);
  assert.ok(
    fake.batches.every((batch) => batch.length === 1 || batch.reduce((a, b) => a + b) <= pipeAtomicBytes),
  );
  assert.equal(fake.taken, lines.map((length, i) => `${String(i % 10).repeat(length - 1)}\n`).join(''));
});

test('a line logged by a later exit listener, while the reader has stalled again, is still written within the exit bound', () => {
  const fake = fakeOutput();
  const sink = new LogSink(fake.output);
  fake.capacity = 0;
  sink.write('held\n');
  fake.opensAt = 500;
  sink.flushAtExit(2_000);
  assert.equal(fake.taken, 'held\n');
  assert.equal(fake.now, 500);
  // Stalled again when a later exit listener logs: no timer runs after exit, so the sink must wait.
  fake.capacity = 0;
  fake.opensAt = 800;
  sink.write('in a later exit listener\n');
  assert.equal(fake.taken, 'held\nin a later exit listener\n');
  assert.equal(fake.now, 800);
  // Past the bound, a stalled reader is tried once, and not waited for.
  fake.capacity = 0;
  fake.opensAt = 5_000;
  sink.write('too late\n');
  sink.write('after the bound\n');
  assert.equal(fake.now, 2_000, 'never past the bound');
  assert.equal(fake.taken, 'held\nin a later exit listener\n');
});

test("a process's last line comes after every line held and after the drop report, is kept past the bound, and the exit waits for a stalled reader once, within its bound", () => {
  const fake = fakeOutput();
  const sink = new LogSink(fake.output, { maxBufferedBytes: 60 });
  sink.reportDropsWith((dropped) => sink.write(`dropped ${dropped}\n`));
  fake.capacity = 0;
  sink.write(`${'one'.padEnd(40, '.')}\n`);
  sink.write(`${'two'.padEnd(40, '.')}\n`);
  assert.equal(sink.dropped, 1, 'past the bound');
  sink.finalLine(`kops-controller: ${'x'.repeat(100)}\n`);
  assert.equal(sink.dropped, 1, 'the last line is kept past the bound');
  fake.opensAt = 1_500;
  sink.flushAtExit(2_000);
  assert.equal(fake.now, 1_500);
  assert.equal(fake.taken, `${'one'.padEnd(40, '.')}\ndropped 1\nkops-controller: ${'x'.repeat(100)}\n`);
});

test('a last line a stalled reader never takes costs the exit one wait, the bound', () => {
  const fake = fakeOutput();
  const sink = new LogSink(fake.output);
  fake.capacity = 0;
  sink.write('held\n');
  sink.finalLine('kops-controller: boom\n');
  assert.equal(fake.now, 0, 'the last line waits for nothing by itself');
  sink.flushAtExit(2_000);
  assert.equal(fake.now, 2_000);
  assert.equal(fake.taken, '');
});

test('a fatal record waits for a stalled reader no longer than any other line: the exit after it waits, once', () => {
  const fake = fakeOutput();
  const sink = new LogSink(fake.output);
  const logger = pino({ base: undefined, timestamp: false }, sink);
  fake.capacity = 0;
  logger.info('held');
  // pino flushes its destination after each fatal record, without a timeout.
  logger.fatal('exiting');
  assert.deepEqual(fake.slept, [], 'no wait');
  assert.equal(fake.now, 0);
  fake.opensAt = 300;
  sink.flushAtExit(2_000);
  assert.equal(fake.now, 300);
  assert.match(fake.taken, /^\{"level":30,"msg":"held"\}\n\{"level":60,"msg":"exiting"\}\n$/);
});

/** An output that refuses every write (a stalled reader) until `opensAt` ms, then takes all. */
function stalledThenOpen(opensAt: number) {
  let now = 0;
  let capacity = 0;
  const out = {
    taken: '',
    output: {
      writev(buffers) {
        if (now >= opensAt) capacity = Number.POSITIVE_INFINITY;
        const all = Buffer.concat(buffers);
        const n = Math.min(all.length, capacity);
        if (n === 0) throw Object.assign(new Error('EAGAIN'), { code: 'EAGAIN' });
        capacity -= n;
        out.taken += all.subarray(0, n).toString();
        return n;
      },
      later() {},
      sleep(ms) {
        now += ms;
      },
      now: () => now,
    } satisfies SinkOutput,
  };
  return out;
}

test('with the sink full, the last line still comes last, and the drops before it are reported before it, with their count', () => {
  const fake = stalledThenOpen(500);
  const sink = new LogSink(fake.output, { maxBufferedBytes: 60 });
  sink.reportDropsWith((dropped) => sink.write(`dropped ${dropped}\n`));
  sink.write(`${'one'.padEnd(54, '.')}\n`); // 55 bytes held
  for (let i = 0; i < 5; i++) sink.write(`${'more'.padEnd(20, '.')}\n`); // 5 dropped
  assert.equal(sink.dropped, 5);
  sink.finalLine('kops-controller: boom\n');
  sink.flushAtExit(2_000);
  const lines = fake.taken.trimEnd().split('\n');
  assert.equal(lines.at(-1), 'kops-controller: boom', `the last line is not last: ${JSON.stringify(lines)}`);
  assert.ok(lines.includes('dropped 5'), `the 5 drops are never reported: ${JSON.stringify(lines)}`);
});

test('a line logged after the last line was given (during the exit grace) is written before it, with a stalled reader or one that keeps up (the last line is held until the exit)', () => {
  for (const stalledWrites of [100, 0]) {
    const fake = stalledThenOpen(stalledWrites);
    const sink = new LogSink(fake.output, { maxBufferedBytes: 1_000 });
    sink.write('first\n');
    sink.finalLine('kops-controller: boom\n');
    sink.write('late\n');
    sink.flushAtExit(2_000);
    assert.deepEqual(
      fake.taken.trimEnd().split('\n'),
      ['first', 'late', 'kops-controller: boom'],
      `${stalledWrites}`,
    );
  }
});

test('lines dropped after the last line was given are counted, not reported after it', () => {
  const fake = stalledThenOpen(100);
  const sink = new LogSink(fake.output, { maxBufferedBytes: 60 });
  sink.reportDropsWith((dropped) => sink.write(`dropped ${dropped}\n`));
  sink.write(`${'one'.padEnd(54, '.')}\n`);
  sink.finalLine('kops-controller: boom\n');
  for (let i = 0; i < 3; i++) sink.write(`${'late'.padEnd(20, '.')}\n`);
  assert.equal(sink.dropped, 3);
  sink.flushAtExit(2_000);
  const lines = fake.taken.trimEnd().split('\n');
  assert.equal(lines.at(-1), 'kops-controller: boom', JSON.stringify(lines));
});
