import assert from 'node:assert/strict';
import { test } from 'node:test';
import { clipped, quoted } from './quote.ts';

test('a short value is shown whole, as a JSON string', () => {
  assert.equal(quoted('sts.us-east-1.amazonaws.com'), '"sts.us-east-1.amazonaws.com"');
  assert.equal(quoted(''), '""');
  assert.equal(quoted('a'.repeat(80)), `"${'a'.repeat(80)}"`, 'exactly the bound is not cut');
});

test('a long value is cut to its first characters, with its full length', () => {
  const host = `7-${'\u00e9'.repeat(5800)}`;
  const shown = quoted(host);
  assert.equal(shown, `"7-${'\u00e9'.repeat(78)}"… (5802 characters)`);
  assert.equal(quoted('abcdef', 3), '"abc"… (6 characters)');
});

test('control characters, line separators and bidi overrides are escaped, never written raw', () => {
  assert.equal(quoted('a\nb\u001b[31m'), '"a\\nb\\u001b[31m"');
  assert.equal(quoted('\u0085\u2028\u202e\u2066x'), '"\\u0085\\u2028\\u202e\\u2066x"');
  assert.equal(quoted('say "hi"'), '"say \\"hi\\""');
});

test('a cut never leaves half a surrogate pair', () => {
  const shown = quoted(`a${'\u{1F600}'.repeat(10)}`, 4);
  assert.equal(shown, '"a\u{1F600}"… (21 characters)');
});

test('clipped cuts a sentence to its bound, with its length, and leaves a shorter one alone', () => {
  assert.equal(clipped('the proof is fine', 100), 'the proof is fine');
  assert.equal(clipped(`the credential "${'x'.repeat(100)}"`, 20), 'the credential "xxxx… (117 characters)');
});
