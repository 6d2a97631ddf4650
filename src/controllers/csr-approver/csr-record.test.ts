import assert from 'node:assert/strict';
import { test } from 'node:test';
import { csrRecordOf, kubeletClientSigner } from './csr-record.ts';

const wire = (signerName: string, status: object = {}) => ({
  metadata: { name: 'csr-1', resourceVersion: '7' },
  spec: {
    request: 'UkVRVUVTVA==',
    signerName,
    username: 'system:node:a',
    groups: ['system:nodes'],
    usages: ['client auth'],
    expirationSeconds: 3600,
  },
  status,
});

test('an undecided kubelet CSR keeps everything the checks read', () => {
  assert.deepEqual(csrRecordOf(wire(kubeletClientSigner)), {
    name: 'csr-1',
    resourceVersion: '7',
    signerName: kubeletClientSigner,
    username: 'system:node:a',
    groups: ['system:nodes'],
    usages: ['client auth'],
    request: 'UkVRVUVTVA==',
    expirationSeconds: 3600,
    decided: false,
    issued: false,
  });
});

test('other signers and decided or issued CSRs are cached without their request', () => {
  assert.equal(csrRecordOf(wire('example.com/other')).request, '');
  const denied = csrRecordOf(wire(kubeletClientSigner, { conditions: [{ type: 'Denied', status: 'True' }] }));
  assert.equal(denied.decided, true);
  assert.equal(denied.request, '');
  const issued = csrRecordOf(wire(kubeletClientSigner, { certificate: 'Q0VSVA==' }));
  assert.equal(issued.issued, true);
  assert.equal(issued.request, '');
});
