import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import { kopsRequestSha } from './aws-sts-proof.ts';

test('kopsRequestSha is unpadded base64 of SHA-256', () => {
  const expected = createHash('sha256').update('abc').digest('base64').replace(/=+$/, '');
  assert.equal(kopsRequestSha('abc'), expected);
});
