import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1CertificateSigningRequest } from '@kubernetes/client-node';
import { bootstrapSignerName, queueAnnotations } from './queue.ts';
import { denialRecord } from './queue-signer.ts';

function csr(
  conditions: { type: string; reason?: string; message?: string }[],
  signerName = bootstrapSignerName,
): V1CertificateSigningRequest {
  return {
    metadata: {
      name: 'kops-bootstrap-0123',
      annotations: {
        [queueAnnotations.requestId]: 'r-1',
        [queueAnnotations.claimedNode]: 'node-a',
        [queueAnnotations.remoteAddress]: '10.0.0.7',
      },
    },
    spec: { signerName, request: '', usages: [] },
    status: { conditions: conditions.map((c) => ({ ...c, status: 'True' })) },
  };
}

test("an admin's denial is recorded once, as it happens, with the condition's reason and message", () => {
  const denied = csr([{ type: 'Denied', reason: 'KubectlDeny', message: 'not in the inventory' }]);
  const record = denialRecord(csr([]), denied);
  assert.equal(record?.verdict, 'deny');
  assert.equal(record?.decidedBy, 'admin');
  assert.equal(record?.requestId, 'r-1');
  assert.equal(record?.claimedNodeName, 'node-a');
  assert.equal(record?.remoteAddress, '10.0.0.7');
  assert.deepEqual(record?.reasons, ['denied by an admin: KubectlDeny: not in the inventory']);
  // Already denied before this update (a relist, a new leader): nothing again.
  assert.equal(denialRecord(denied, denied), undefined);
  // Another signer's CSR, or one that is not denied, is not ours to record.
  assert.equal(denialRecord(csr([]), csr([{ type: 'Denied' }], 'kubernetes.io/kubelet-serving')), undefined);
  assert.equal(denialRecord(csr([]), csr([{ type: 'Approved' }])), undefined);
  assert.deepEqual(denialRecord(csr([]), csr([{ type: 'Denied' }]))?.reasons, [
    'denied by an admin: no reason given',
  ]);
});
