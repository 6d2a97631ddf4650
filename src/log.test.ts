import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { test } from 'node:test';
import { createLogger, levelForVerbosity } from './log.ts';
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
