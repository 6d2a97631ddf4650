import assert from 'node:assert/strict';
import { test } from 'node:test';
import { cloneJson, jsonEqual, normalizeTimes, readPath } from './objects.ts';

test('compares and copies JSON values', () => {
  assert.equal(jsonEqual({ a: [1, { b: 2 }] }, { a: [1, { b: 2 }] }), true);
  assert.equal(jsonEqual({ a: 1 }, { a: 1, b: undefined }), false);
  assert.equal(jsonEqual([1], { 0: 1 }), false);
  const original = { a: { b: [1] } };
  const copy = cloneJson(original);
  copy.a.b.push(2);
  assert.deepEqual(original.a.b, [1]);
  assert.equal(readPath({ spec: { nodeName: 'n' } }, 'spec.nodeName'), 'n');
  assert.equal(readPath({ spec: 'x' }, 'spec.nodeName'), undefined);
});

test('normalizes Time to seconds and MicroTime to six digits, leaving labels alone', () => {
  const obj = {
    metadata: {
      creationTimestamp: '2026-01-02T03:04:05.999Z',
      labels: { renewTime: '2026-01-02T03:04:05.1Z' },
    },
    spec: { renewTime: '2026-01-02T03:04:05.1Z', acquireTime: '2026-01-02T04:04:05+01:00' },
    status: { conditions: [{ lastTransitionTime: '2026-01-02T03:04:05.000Z' }] },
  };
  normalizeTimes(obj);
  assert.equal(obj.metadata.creationTimestamp, '2026-01-02T03:04:05Z');
  assert.equal(obj.metadata.labels.renewTime, '2026-01-02T03:04:05.1Z');
  assert.deepEqual(obj.spec, {
    renewTime: '2026-01-02T03:04:05.100000Z',
    acquireTime: '2026-01-02T03:04:05.000000Z',
  });
  assert.equal(obj.status.conditions[0]?.lastTransitionTime, '2026-01-02T03:04:05Z');
});
