import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { managedLabelsAnnotation } from '../../nodelabels/diff-labels.ts';
import { managedLabelsSignatureAnnotation } from '../../nodelabels/signed-managed-labels.ts';
import { type NodeRecord, needsReconcile, nodeRecordOf } from './node-record.ts';

const record: NodeRecord = {
  name: 'n1',
  uid: 'u1',
  providerID: 'aws:///us-east-1a/i-1',
  labels: { a: '1' },
  managedLabels: 'a',
  managedLabelsSignature: 'v1:sig',
  resourceVersion: '5',
};

describe('node records', () => {
  test('keep only what labelling reads', () => {
    assert.deepEqual(
      nodeRecordOf({
        metadata: {
          name: 'n1',
          uid: 'u1',
          resourceVersion: '5',
          labels: { a: '1' },
          annotations: {
            [managedLabelsAnnotation]: 'a',
            [managedLabelsSignatureAnnotation]: 'v1:sig',
            other: 'x',
          },
        },
        spec: { providerID: 'aws:///us-east-1a/i-1', podCIDR: '10.0.0.0/24' },
        status: { conditions: [{ type: 'Ready', status: 'True' }] },
      }),
      record,
    );
    assert.deepEqual(nodeRecordOf({ metadata: { uid: 'u0' } }), {
      name: '',
      uid: 'u0',
      providerID: '',
      labels: {},
      managedLabels: undefined,
      managedLabelsSignature: undefined,
      resourceVersion: '',
    });
  });

  test('a Node without a uid, or whose fields have the wrong JSON types, is refused', () => {
    const spoilt: unknown[] = [
      {},
      { metadata: { uid: 7 } },
      { metadata: { uid: 'u', labels: 'a=1' } },
      { metadata: { uid: 'u', labels: ['a'] } },
      { metadata: { uid: 'u', labels: { a: 1 } } },
      { metadata: { uid: 'u', annotations: 'x' } },
      { metadata: { uid: 'u', annotations: { [managedLabelsAnnotation]: ['a'] } } },
      { metadata: { uid: 'u', resourceVersion: 5 } },
      { metadata: { uid: 'u' }, spec: { providerID: 42 } },
      { metadata: { uid: 'u' }, spec: 'aws:///z/i-1' },
    ];
    for (const node of spoilt) {
      assert.throws(() => nodeRecordOf(node as never), /uid|not a|spec/, JSON.stringify(node));
    }
  });

  test('a status-only update needs no reconcile; providerID, labels, managed set or its signature do', () => {
    assert.equal(needsReconcile(record, { ...record, resourceVersion: '6' }), false);
    assert.equal(needsReconcile(record, { ...record, providerID: 'aws:///us-east-1a/i-2' }), true);
    assert.equal(needsReconcile(record, { ...record, labels: { a: '2' } }), true);
    assert.equal(needsReconcile(record, { ...record, labels: { a: '1', b: '' } }), true);
    assert.equal(needsReconcile(record, { ...record, labels: { b: '1' } }), true);
    assert.equal(needsReconcile(record, { ...record, managedLabels: undefined }), true);
    assert.equal(needsReconcile(record, { ...record, managedLabelsSignature: 'v1:other' }), true);
    assert.equal(needsReconcile(record, { ...record, managedLabelsSignature: undefined }), true);
  });
});
