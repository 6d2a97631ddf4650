import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { capturedLogger } from '../testing/log-capture.ts';
import { causeOf, FailureCauses, maxCauseChars } from './failure-causes.ts';

describe('failure causes', () => {
  test('the name is taken out where it stands whole, not inside a longer name', () => {
    const err = new Error(
      'EC2 has no instance i-abc (aws:///us-test-1a/i-abc); i-abcd and xi-abc are others',
    );
    assert.equal(
      causeOf(err, 'i-abc'),
      'EC2 has no instance <item> (aws:///us-test-1a/<item>); i-abcd and xi-abc are others',
    );
    assert.equal(causeOf(new Error('a: HTTP 503'), 'a'), '<item>: HTTP 503');
    assert.equal(causeOf(new Error('nothing named'), 'node-1'), 'nothing named');
  });

  test('a cause of megabytes is kept and written cut short', () => {
    const cause = causeOf(new Error(`denied: ${'x'.repeat(1_000_000)}`), 'csr-1');
    assert.equal(cause.length, maxCauseChars + 1);
    assert.ok(cause.endsWith('…'));
  });

  test('when full, causes quiet for ten minutes make room; until then new causes share one line', () => {
    let now = 0;
    const { logger, lines } = capturedLogger();
    const causes = new FailureCauses(logger, { message: 'failed', maxCauses: 2, now: () => now });
    causes.failed(new Error('one'), 'a');
    causes.failed(new Error('two'), 'b');
    causes.failed(new Error('three'), 'c');
    causes.failed(new Error('four'), 'd');
    const errs = () => lines.map((l) => (JSON.parse(l) as { err: string }).err);
    assert.deepEqual(errs(), ['one', 'two', 'failures of more than 2 different causes']);
    now = 300_000;
    causes.failed(new Error('two'), 'b');
    now = 600_000;
    causes.failed(new Error('five'), 'e');
    assert.equal(causes.size, 2, '"one" was forgotten, "two" failed within the ten minutes');
    assert.deepEqual(errs().slice(3), ['five']);
  });
});
