import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { test } from 'node:test';
import { createLogger, levelForVerbosity, RecurringFailureLog } from './log.ts';
import { capturedLogger } from './testing/log-capture.ts';

function capture(): { stream: Writable; lines: () => Record<string, unknown>[] } {
  const chunks: string[] = [];
  const stream = new Writable({
    write(chunk, _enc, done) {
      chunks.push(String(chunk));
      done();
    },
  });
  return {
    stream,
    lines: () =>
      chunks
        .join('')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as Record<string, unknown>),
  };
}

test('log records are JSON with a level name and never carry secrets', () => {
  const out = capture();
  const log = createLogger({ level: 'info', destination: out.stream });
  log.info({ token: 'abcdef.0123456789abcdef', req: { headers: { authorization: 'Bearer x' } } }, 'hello');
  const [record] = out.lines();
  assert.ok(record);
  assert.equal(record.level, 'info');
  assert.equal(record.msg, 'hello');
  assert.equal(record.token, '[redacted]');
  assert.deepEqual(record.req, { headers: { authorization: '[redacted]' } });
  assert.doesNotMatch(JSON.stringify(record), /0123456789abcdef|Bearer/);
});

test('klog verbosity maps onto pino levels', () => {
  assert.equal(levelForVerbosity(0), 'warn');
  assert.equal(levelForVerbosity(2), 'info');
  assert.equal(levelForVerbosity(4), 'debug');
  assert.equal(levelForVerbosity(9), 'trace');
  // The CLI refuses anything else (src/cli/common.ts); a caller that passes it is a bug, not trace.
  for (const bad of [Number.NaN, -1, 2.5]) assert.throws(() => levelForVerbosity(bad), RangeError);
});

test('a component named by its supervisor and by itself is named once, the inner name winning', () => {
  const { logger: log, lines: chunks } = capturedLogger();
  log.child({ component: 'a' }).child({ component: 'b' }).info('tick');
  assert.equal(chunks.join('').match(/"component"/g)?.length, 1);
  assert.equal((JSON.parse(chunks.join('')) as { component: string }).component, 'b');
});

test('the text format is one readable line a record, secrets redacted as in JSON', () => {
  const { logger: log, lines: chunks } = capturedLogger({ format: 'text' });
  log
    .child({ component: 'x' })
    .warn({ node: 'n-1', token: 'abcdef.0123456789abcdef', why: 'two words' }, 'odd node');
  assert.equal(
    chunks.join(''),
    'kops-controller: warn: odd node component=x node=n-1 token=[redacted] why="two words"\n',
  );
});

test('a recurring failure is written at once, then once per quiet period with the count held back; a new failure at once', () => {
  const { logger, lines } = capturedLogger({ level: 'debug' });
  let now = 0;
  const log = new RecurringFailureLog(logger, {
    message: 'list failed; retrying',
    recoveredMessage: 'list works again',
    quietMs: 60_000,
    now: () => now,
  });
  const forbidden = new Error('HTTP 403: pods is forbidden');
  const records = () => lines.map((l) => JSON.parse(l) as Record<string, unknown>);
  const written = () => records().filter((r) => r['level'] !== 'debug');

  log.failed(forbidden, { retryInMs: 1000 });
  for (let i = 0; i < 5; i++) {
    now += 10_000;
    log.failed(forbidden);
  }
  assert.deepEqual(
    written().map((r) => [r['level'], r['msg'], r['failures'], r['repeated'], r['retryInMs']]),
    [['warn', 'list failed; retrying', 1, undefined, 1000]],
  );
  assert.equal(
    records().filter((r) => r['level'] === 'debug').length,
    5,
    'the held-back failures are at debug',
  );

  now += 10_000; // 60 s after the first line: written again, saying how many were held back
  log.failed(forbidden);
  assert.deepEqual(
    written().map((r) => [r['failures'], r['repeated']]),
    [
      [1, undefined],
      [7, 5],
    ],
  );

  now += 1_000; // another failure is news: written at once
  log.failed(new Error('HTTP 500: etcdserver: request timed out'));
  assert.equal(written().at(-1)?.['err'], 'HTTP 500: etcdserver: request timed out');
  assert.equal(written().at(-1)?.['repeated'], undefined, "what was held back of the 403 is not this one's");
  assert.equal(log.failures, 8);

  log.succeeded();
  assert.deepEqual(written().at(-1), {
    ...written().at(-1),
    level: 'info',
    msg: 'list works again',
    failures: 8,
  });
  assert.equal(log.failures, 0);
  log.succeeded();
  assert.equal(written().length, 4, 'success without failures writes nothing');

  log.failed(forbidden); // a new run starts loud again
  assert.equal(written().at(-1)?.['failures'], 1);
  assert.equal(written().at(-1)?.['level'], 'warn');
});

test('a recurring failure can be written at error level', () => {
  const { logger, lines } = capturedLogger();
  const log = new RecurringFailureLog(logger, {
    message: 'failed; restarting',
    level: 'error',
    now: () => 0,
  });
  log.failed(new Error('boom'));
  log.failed(new Error('boom'));
  assert.deepEqual(
    lines.map((l) => (JSON.parse(l) as { level: string }).level),
    ['error'],
  );
});

test('failures that alternate are each written once per quiet period, each with its own count held back', () => {
  const { logger, lines } = capturedLogger({ level: 'debug' });
  let now = 0;
  const log = new RecurringFailureLog(logger, {
    message: 'renew failed; retrying',
    quietMs: 60_000,
    now: () => now,
  });
  const unavailable = new Error('HTTP 503: the server is currently unable to handle the request');
  const timeout = new Error('the API server did not answer within 10000 ms');
  const written = () =>
    lines
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .filter((r) => r['level'] !== 'debug')
      .map((r) => [r['err'], r['failures'], r['repeated']]);

  // 503, timeout, 503, timeout … every 2 s: each is news once, then held back for its quiet period.
  for (let i = 0; i < 30; i++) {
    log.failed(i % 2 === 0 ? unavailable : timeout);
    now += 2_000;
  }
  assert.deepEqual(written(), [
    [unavailable.message, 1, undefined],
    [timeout.message, 2, undefined],
  ]);
  // 60 s after each one's first line, each is written again with what was held back of it alone.
  log.failed(unavailable); // now = 60 s
  now += 2_000;
  log.failed(timeout); // 62 s
  assert.deepEqual(written().slice(2), [
    [unavailable.message, 31, 14],
    [timeout.message, 32, 14],
  ]);
  assert.equal(log.failures, 32);
});

test('a failure remembered among many is forgotten past the bound: written again at once, not held back', () => {
  const { logger, lines } = capturedLogger({ level: 'debug' });
  const log = new RecurringFailureLog(logger, { message: 'failed', quietMs: 60_000, now: () => 0 });
  const written = () => lines.filter((l) => !l.includes('"level":"debug"')).length;
  for (let i = 0; i < 8; i++) log.failed(new Error(`cause ${i}`));
  log.failed(new Error('cause 0'));
  assert.equal(written(), 8, 'the eight most recent causes are remembered');
  log.failed(new Error('cause 8')); // a ninth: the one seen longest ago (cause 1) is forgotten
  log.failed(new Error('cause 1'));
  assert.equal(written(), 10);
});
