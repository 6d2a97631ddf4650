import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { InvalidInputError } from '../errors.ts';
import { parseAuthorization } from './authorization.ts';

describe('parseAuthorization', () => {
  test('maps every scheme to its proof kind and keeps the credential as sent', () => {
    assert.deepEqual(parseAuthorization('x-aws-sts eyJh'), { kind: 'aws-sts', version: 1, token: 'eyJh' });
    assert.deepEqual(parseAuthorization('x-aws-sts-v2 abc='), { kind: 'aws-sts', version: 2, token: 'abc=' });
    assert.deepEqual(parseAuthorization('x-gce-tpm dA=='), { kind: 'gce-tpm', token: 'dA==' });
    assert.deepEqual(parseAuthorization('x-gce-identity a.b.c'), {
      kind: 'gce-identity-token',
      token: 'a.b.c',
    });
    assert.deepEqual(parseAuthorization('Bearer abcdef.0123456789abcdef'), {
      kind: 'bootstrap-token',
      token: 'abcdef.0123456789abcdef',
    });
    assert.deepEqual(parseAuthorization('x-pki-tpm eyJk'), { kind: 'pki-tpm', token: 'eyJk' });
    assert.deepEqual(parseAuthorization('x-kops-renewal eyJr'), { kind: 'node-renewal', token: 'eyJr' });
    assert.deepEqual(parseAuthorization('x-hetzner-id 42'), {
      kind: 'cloud-id',
      scheme: 'x-hetzner-id',
      token: '42',
    });
    assert.deepEqual(parseAuthorization('X-Linode-Instance-Id 7'), {
      kind: 'cloud-id',
      scheme: 'x-linode-instance-id',
      token: '7',
    });
  });

  test("Azure's proof keeps both of its credentials; no other scheme takes two", () => {
    assert.deepEqual(parseAuthorization('x-azure-id /subscriptions/s/vm MIIB'), {
      kind: 'cloud-id',
      scheme: 'x-azure-id',
      token: '/subscriptions/s/vm MIIB',
    });
    assert.throws(() => parseAuthorization('x-hetzner-id 42 43'), InvalidInputError);
  });

  test('no header is no proof', () => {
    assert.deepEqual(parseAuthorization(undefined), { kind: 'none' });
    assert.deepEqual(parseAuthorization('  '), { kind: 'none' });
  });

  test('unknown schemes, missing credentials and oversized values are input errors', () => {
    for (const bad of [
      'Basic dXNlcjpwYXNz',
      'x-aws-sts',
      'Bearer a b',
      'constructor x',
      `Bearer ${'a'.repeat(20_000)}`,
    ]) {
      assert.throws(() => parseAuthorization(bad), InvalidInputError, bad.slice(0, 20));
    }
  });
});
