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
