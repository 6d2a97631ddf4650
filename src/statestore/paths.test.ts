import assert from 'node:assert/strict';
import { test } from 'node:test';
import { InvalidInputError } from '../errors.ts';
import {
  bucketLocation,
  checkListPrefix,
  checkObjectPath,
  joinKey,
  listScope,
  trimSlashes,
} from './paths.ts';

test('accepts relative object paths', () => {
  assert.equal(checkObjectPath('instancegroup/nodes'), 'instancegroup/nodes');
  assert.equal(checkObjectPath('cluster-completed.spec'), 'cluster-completed.spec');
  assert.equal(checkObjectPath('..hidden/x..'), '..hidden/x..');
});

test('refuses paths that are empty, absolute, or walk out of the root', () => {
  for (const bad of ['', '/abs', '..', 'a/../../b', './a', 'a//b', 'a/', 'nul\0byte']) {
    assert.throws(() => checkObjectPath(bad), InvalidInputError, JSON.stringify(bad));
  }
});

test('list prefixes may be empty or end with a slash', () => {
  assert.equal(checkListPrefix(''), '');
  assert.equal(checkListPrefix('instancegroup/'), 'instancegroup/');
  assert.equal(checkListPrefix('instancegroup/no'), 'instancegroup/no');
  assert.throws(() => checkListPrefix('../'), InvalidInputError);
  assert.throws(() => checkListPrefix('/'), InvalidInputError);
});

test('joins keys under a root and trims URL paths', () => {
  assert.equal(joinKey('', 'config'), 'config');
  assert.equal(joinKey('c1', 'config'), 'c1/config');
  assert.equal(trimSlashes('/a/b/'), 'a/b');
  assert.equal(trimSlashes('/'), '');
});

test('a bucket URL gives its bucket, key prefix and canonical form', () => {
  assert.deepEqual(bucketLocation(new URL('s3://state/clusters/c1/'), 's3'), {
    bucket: 'state',
    root: 'clusters/c1',
    url: 's3://state/clusters/c1',
  });
  assert.deepEqual(bucketLocation(new URL('gs://state'), 'gs'), {
    bucket: 'state',
    root: '',
    url: 'gs://state',
  });
});

test('a listing is scoped under the root and its keys made relative again', () => {
  assert.deepEqual(listScope('', 'instancegroup/'), { full: 'instancegroup/', strip: 0 });
  const { full, strip } = listScope('clusters/c1', 'instancegroup/');
  assert.equal(full, 'clusters/c1/instancegroup/');
  assert.equal('clusters/c1/instancegroup/nodes'.slice(strip), 'instancegroup/nodes');
  assert.throws(() => listScope('c1', '../'), InvalidInputError);
});
