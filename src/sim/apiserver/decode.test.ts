import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import { Readable } from 'node:stream';
import { test } from 'node:test';
import { InvalidInputError, TooLargeError } from '../../errors.ts';
import {
  checkUnknownFields,
  decodeObject,
  dryRunOf,
  maxBodyBytes,
  readBody,
  warningHeaders,
} from './decode.ts';
import { resourceTypeByName } from './resources.ts';

const nodes = resourceTypeByName('nodes')!;
const request = (contentType: string, headers: Record<string, string> = {}) =>
  ({ headers: { 'content-type': contentType, ...headers } }) as unknown as IncomingMessage;
const url = (query = '') => new URL(`https://sim/api/v1/nodes${query}`);

test('defaults apiVersion and kind from the URL and refuses mismatches', () => {
  const { obj } = decodeObject(
    request('application/json'),
    url(),
    nodes,
    Buffer.from('{"metadata":{"name":"n"}}'),
  );
  assert.deepEqual(obj, { metadata: { name: 'n' }, apiVersion: 'v1', kind: 'Node' });
  assert.throws(
    () => decodeObject(request('application/json'), url(), nodes, Buffer.from('{"kind":"Pod"}')),
    InvalidInputError,
  );
  const yaml = decodeObject(request('application/yaml'), url(), nodes, Buffer.from('metadata:\n  name: y\n'));
  assert.equal(yaml.obj.metadata.name, 'y');
  assert.throws(() => decodeObject(request('text/plain'), url(), nodes, Buffer.from('{}')), /unknown format/);
});

test('applies fieldValidation to unknown fields', () => {
  const body = () => ({ metadata: { name: 'n' }, spec: { bogus: 1 } });
  assert.deepEqual(checkUnknownFields(url(), nodes, body()), ['unknown field "spec.bogus"']);
  assert.deepEqual(checkUnknownFields(url('?fieldValidation=Ignore'), nodes, body()), []);
  assert.throws(
    () => checkUnknownFields(url('?fieldValidation=Strict'), nodes, body()),
    /strict decoding error: unknown field "spec.bogus"/,
  );
  assert.throws(() => checkUnknownFields(url('?fieldValidation=Maybe'), nodes, body()), InvalidInputError);
  assert.deepEqual(warningHeaders(['unknown field "a"']), { Warning: '299 - "unknown field \\"a\\""' });
});

test('reads bodies up to the limit only', async () => {
  const small = Object.assign(Readable.from([Buffer.from('ab'), Buffer.from('c')]), { headers: {} });
  assert.equal((await readBody(small as unknown as IncomingMessage)).toString(), 'abc');
  const declared = Object.assign(Readable.from([]), {
    headers: { 'content-length': String(maxBodyBytes + 1) },
  });
  await assert.rejects(readBody(declared as unknown as IncomingMessage), TooLargeError);
  const streamed = Object.assign(Readable.from([Buffer.alloc(maxBodyBytes), Buffer.alloc(1)]), {
    headers: {},
  });
  await assert.rejects(readBody(streamed as unknown as IncomingMessage), TooLargeError);
});

test('accepts only dryRun=All', () => {
  assert.equal(dryRunOf(url()), false);
  assert.equal(dryRunOf(url('?dryRun=All')), true);
  assert.throws(() => dryRunOf(url('?dryRun=Some')), InvalidInputError);
});
