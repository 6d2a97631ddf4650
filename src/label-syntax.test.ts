import assert from 'node:assert/strict';
import { test } from 'node:test';
import { labelKeyProblem, labelValueProblem } from './label-syntax.ts';

test('accepts the keys kops and Kubernetes use', () => {
  for (const key of [
    'node-role.kubernetes.io/control-plane',
    'kops.k8s.io/instancegroup',
    'node.kubernetes.io/exclude-from-external-load-balancers',
    'team',
    'a_b.c-d',
  ]) {
    assert.equal(labelKeyProblem(key), undefined, key);
  }
});

test('rejects malformed keys with the reason', () => {
  assert.match(labelKeyProblem('')!, /name must be 1-63/);
  assert.match(labelKeyProblem('Example.COM/x')!, /prefix must be a lower-case DNS subdomain/);
  assert.match(labelKeyProblem('x/')!, /name must be/);
  assert.match(labelKeyProblem('-leading')!, /starting and ending/);
  assert.match(labelKeyProblem('a'.repeat(64))!, /1-63/);
  assert.match(labelKeyProblem('has space')!, /name must be/);
});

test('values may be empty or a short name', () => {
  assert.equal(labelValueProblem(''), undefined);
  assert.equal(labelValueProblem('nodes-us-test-1a'), undefined);
  assert.match(labelValueProblem('a/b')!, /must be empty or 1-63/);
  assert.match(labelValueProblem('x'.repeat(64))!, /1-63/);
});
