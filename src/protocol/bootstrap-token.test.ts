import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isTokenId, isTokenSecret, parseToken } from './bootstrap-token.ts';

test('exactly six and sixteen characters of [a-z0-9], one dot', () => {
  assert.deepEqual(parseToken('abcdef.0123456789abcdef'), { id: 'abcdef', secret: '0123456789abcdef' });
  for (const bad of [
    'abcdef.0123456789abcdef\n',
    'ABCDEF.0123456789abcdef',
    'abcde.0123456789abcdef',
    'abcdef.0123456789abcde',
    'abcdef:0123456789abcdef',
    ' abcdef.0123456789abcdef',
    'abcdef.0123456789abcdefg',
    '',
  ]) {
    assert.equal(parseToken(bad), undefined, JSON.stringify(bad));
  }
});

test('an id is six and a secret sixteen characters of [a-z0-9]', () => {
  assert.equal(isTokenId('abcdef'), true);
  assert.equal(isTokenSecret('0123456789abcdef'), true);
  for (const bad of ['abcde', 'abcdefg', 'ABCDEF', 'abc-ef', '']) assert.equal(isTokenId(bad), false, bad);
  for (const bad of ['0123456789abcde', '0123456789abcdefg', '0123456789ABCDEF', '']) {
    assert.equal(isTokenSecret(bad), false, bad);
  }
});
