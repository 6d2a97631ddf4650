import assert from 'node:assert/strict';
import { test } from 'node:test';
import { dropUnknownFields, shapeOfKind } from './schema.ts';

test('finds and drops unknown fields at any modelled depth', () => {
  const node = {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name: 'n', labels: { any: 'key' }, bogus: 1 },
    spec: { taints: [{ key: 'k', effect: 'NoSchedule', extra: true }], podCIDR: '10.0.0.0/24' },
    status: { nodeInfo: { anything: 'goes' } },
    top: {},
  };
  assert.deepEqual(dropUnknownFields(node, shapeOfKind('Node')), [
    'metadata.bogus',
    'spec.taints[0].extra',
    'top',
  ]);
  assert.deepEqual(node.metadata, { name: 'n', labels: { any: 'key' } });
  assert.deepEqual(node.spec.taints, [{ key: 'k', effect: 'NoSchedule' }]);
  assert.equal('top' in node, false);
});

test('knows the fields of every served kind', () => {
  assert.deepEqual(dropUnknownFields({ data: { a: 'b' }, immutable: true }, shapeOfKind('ConfigMap')), []);
  assert.deepEqual(
    dropUnknownFields({ spec: { holderIdentity: 'x', renewTime: 't' } }, shapeOfKind('Lease')),
    [],
  );
  assert.deepEqual(
    dropUnknownFields(
      { spec: { request: 'r', signerName: 's', usages: [] }, status: { conditions: [{ type: 'Approved' }] } },
      shapeOfKind('CertificateSigningRequest'),
    ),
    [],
  );
  assert.deepEqual(
    dropUnknownFields(
      { spec: { containers: [], nodeName: 'n' }, status: { phase: 'Running' } },
      shapeOfKind('Pod'),
    ),
    [],
  );
});
