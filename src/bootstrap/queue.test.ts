import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { V1CertificateSigningRequest } from '@kubernetes/client-node';
import { ForbiddenError } from '../errors.ts';
import { createCa } from '../pki/ca.ts';
import { parseCsr } from '../pki/csr.ts';
import { buildCsrPem } from '../pki/csr-build.ts';
import { generateKey, spkiOf } from '../pki/keys.ts';
import {
  bootstrapSignerName,
  hasValidSeal,
  queuedCsrName,
  queuedCsrObject,
  readQueuedRequest,
  sealKeyOf,
  stateOf,
} from './queue.ts';
import type { BootstrapRequest, NodeFacts } from './types.ts';

const key = generateKey();
const facts: NodeFacts = {
  nodeName: 'node-q',
  dnsNames: [],
  ipAddresses: ['10.1.2.3'],
  evidence: { verified: 'false' },
};
const request: BootstrapRequest = {
  id: 'r1',
  body: Buffer.from('{}'),
  claimedNodeName: 'node-q',
  certificates: {
    kubelet: parseCsr(
      buildCsrPem(key, { subject: { commonName: 'system:node:node-q', organizations: ['system:nodes'] } }),
    ),
    'kubelet-server': parseCsr(
      buildCsrPem(generateKey(), {
        subject: { commonName: 'node-q', organizations: [] },
        ipAddresses: ['10.1.2.3'],
      }),
    ),
  },
  proof: { kind: 'none' },
  remoteAddress: '10.1.2.3',
  receivedAt: new Date(),
};

describe('queued CSR objects', () => {
  const sealKey = sealKeyOf(createCa());

  test('the name depends on the key and the claimed name only, and is a valid object name', () => {
    const name = queuedCsrName(spkiOf(key), 'node-q');
    assert.match(name, /^kops-bootstrap-[0-9a-f]{40}$/);
    assert.equal(queuedCsrName(spkiOf(key), 'node-q'), name);
    assert.notEqual(queuedCsrName(spkiOf(key), 'node-r'), name);
    assert.notEqual(queuedCsrName(spkiOf(generateKey()), 'node-q'), name);
  });

  test('a sealed object reads back with its facts and every request; it is pending until decided', () => {
    const object = queuedCsrObject(request, facts, sealKey);
    assert.equal(object.spec?.signerName, bootstrapSignerName);
    assert.equal(object.metadata?.labels?.['bootstrap.kops.k8s.io/node'], 'node-q');
    const queued = readQueuedRequest(object, sealKey);
    assert.deepEqual(queued.facts, facts);
    assert.deepEqual(Object.keys(queued.requests).sort(), ['kubelet', 'kubelet-server']);
    assert.equal(stateOf(object, sealKey).state, 'pending');
  });

  test('any change to the request or its evidence breaks the seal; so does another CA', () => {
    const object = queuedCsrObject(request, facts, sealKey);
    const tampered = (change: (o: V1CertificateSigningRequest) => void) => {
      const copy = structuredClone(object);
      change(copy);
      return copy;
    };
    const annotations = (o: V1CertificateSigningRequest) => o.metadata?.annotations as Record<string, string>;
    const cases = [
      tampered((o) => {
        annotations(o)['bootstrap.kops.k8s.io/facts'] = JSON.stringify({
          ...facts,
          ipAddresses: ['10.9.9.9'],
        });
      }),
      tampered((o) => {
        annotations(o)['bootstrap.kops.k8s.io/extra-requests'] = '{}';
      }),
      tampered((o) => {
        (o.spec as { request: string }).request = Buffer.from(
          buildCsrPem(generateKey(), {
            subject: { commonName: 'system:node:node-q', organizations: ['system:nodes'] },
          }),
        ).toString('base64');
      }),
      tampered((o) => {
        (o.metadata as { name: string }).name = 'kops-bootstrap-0000000000000000000000000000000000000000';
      }),
      tampered((o) => {
        (o.spec as { signerName: string }).signerName = 'kubernetes.io/kube-apiserver-client-kubelet';
      }),
    ];
    assert.equal(hasValidSeal(object, sealKey), true);
    for (const csr of cases) {
      assert.equal(hasValidSeal(csr, sealKey), false);
      assert.throws(() => readQueuedRequest(csr, sealKey), ForbiddenError);
    }
    assert.equal(hasValidSeal(object, sealKeyOf(createCa())), false);
  });

  test('Denied and Failed conditions read as denied with their reason; a certificate as issued', () => {
    const object = queuedCsrObject(request, facts, sealKey);
    const denied = {
      ...object,
      status: { conditions: [{ type: 'Denied', status: 'True', reason: 'Unknown', message: 'who?' }] },
    };
    assert.deepEqual(stateOf(denied, sealKey), {
      state: 'denied',
      name: object.metadata?.name,
      nodeName: 'node-q',
      reasons: ['denied: Unknown', 'who?'],
    });
    const issued = {
      ...object,
      metadata: {
        ...object.metadata,
        annotations: {
          ...object.metadata?.annotations,
          'bootstrap.kops.k8s.io/extra-certificates': '{"kubelet-server":"S"}',
        },
      },
      status: { certificate: Buffer.from('K').toString('base64') },
    };
    const state = stateOf(issued, sealKey);
    assert.equal(state.state, 'issued');
    assert.deepEqual(state.state === 'issued' && state.certificates, { kubelet: 'K', 'kubelet-server': 'S' });
  });
});
