import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import { kopsRequestSha, stsHost } from './aws-sts-proof.ts';

test('kopsRequestSha is unpadded base64 of SHA-256; stsHost knows the China partition', () => {
  const expected = createHash('sha256').update('abc').digest('base64').replace(/=+$/, '');
  assert.equal(kopsRequestSha('abc'), expected);
  assert.equal(stsHost('cn-north-1'), 'sts.cn-north-1.amazonaws.com.cn');
});
