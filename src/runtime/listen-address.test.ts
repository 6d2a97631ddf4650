import assert from 'node:assert/strict';
import { test } from 'node:test';
import { InvalidInputError } from '../errors.ts';
import { parseListenAddress, urlOf } from './listen-address.ts';

test('parses the listen address forms kops writes', () => {
  assert.deepEqual(parseListenAddress(':3987'), { host: undefined, port: 3987 });
  assert.deepEqual(parseListenAddress('127.0.0.1:0'), { host: '127.0.0.1', port: 0 });
  assert.deepEqual(parseListenAddress('[::1]:3988'), { host: '::1', port: 3988 });
  assert.deepEqual(parseListenAddress('localhost:80'), { host: 'localhost', port: 80 });
});

test('rejects what cannot be bound', () => {
  for (const bad of ['3987', 'host:', ':70000', '[::1:3988', 'a b:1']) {
    assert.throws(() => parseListenAddress(bad), InvalidInputError, bad);
  }
});

test('builds URLs for bound addresses, bracketing IPv6', () => {
  assert.equal(urlOf({ address: '127.0.0.1', family: 'IPv4', port: 8 }), 'http://127.0.0.1:8');
  assert.equal(urlOf({ address: '::1', family: 'IPv6', port: 8 }, 'https'), 'https://[::1]:8');
});
