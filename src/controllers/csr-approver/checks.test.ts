import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { describe, test } from 'node:test';
import type { NodeIdentity } from '../../cloud/types.ts';
import { buildCsrPem, type CsrContent } from '../../pki/csr-build.ts';
import { generateKey } from '../../pki/keys.ts';
import {
  assessCsr,
  assessInstance,
  kubeletClientSigner,
  kubeletServingSigner,
  requestingNode,
} from './checks.ts';
import type { CsrRecord } from './csr-record.ts';

const node = 'i-0123456789abcdef0';
const user = `system:node:${node}`;

function record(overrides: Partial<CsrRecord> = {}, content: Partial<CsrContent> = {}): CsrRecord {
  const pem = buildCsrPem(generateKey(), {
    subject: { commonName: user, organizations: ['system:nodes'] },
    ...content,
  });
  return {
    name: 'csr-1',
    resourceVersion: '1',
    signerName: kubeletClientSigner,
    username: user,
    groups: ['system:nodes', 'system:authenticated'],
    usages: ['digital signature', 'key encipherment', 'client auth'],
    request: Buffer.from(pem).toString('base64'),
    decided: false,
    issued: false,
    ...overrides,
  };
}

const clientOnly = ['digital signature', 'client auth'];

const serving = {
  signerName: kubeletServingSigner,
  usages: ['digital signature', 'server auth'],
};

function denial(assessment: ReturnType<typeof assessCsr>): { reason: string; message: string } {
  assert.equal(assessment.action, 'deny', JSON.stringify(assessment));
  return assessment as { reason: string; message: string };
}

describe('requestingNode', () => {
  test('needs the system:node: prefix, a name and the system:nodes group', () => {
    assert.equal(requestingNode(user, ['system:nodes']), node);
    assert.equal(requestingNode(user, ['system:authenticated']), undefined);
    assert.equal(requestingNode('system:node:', ['system:nodes']), undefined);
    assert.equal(requestingNode('system:bootstrap:abcdef', ['system:nodes']), undefined);
  });
});

describe('assessCsr', () => {
  test('a client renewal by the node itself goes on to the instance check, with or without key encipherment', () => {
    const renewal = {
      action: 'verify-instance',
      nodeName: node,
      serving: false,
      dnsNames: [],
      ipAddresses: [],
    };
    assert.deepEqual(assessCsr(record()), renewal);
    assert.deepEqual(assessCsr(record({ usages: ['client auth', 'digital signature'] })), renewal);
  });

  test('decided, issued, foreign-signer and non-node requests are ignored', () => {
    assert.equal(assessCsr(record({ decided: true })).action, 'ignore');
    assert.equal(assessCsr(record({ issued: true })).action, 'ignore');
    assert.equal(assessCsr(record({ signerName: 'kubernetes.io/kube-apiserver-client' })).action, 'ignore');
    assert.equal(assessCsr(record({ username: 'admin', groups: ['system:masters'] })).action, 'ignore');
    assert.equal(assessCsr(record({ groups: ['system:bootstrappers'] })).action, 'ignore');
  });

  test('asking for another node’s name is denied', () => {
    const other = record({ username: 'system:node:i-0fffffffffffffff0' });
    const { reason, message } = denial(assessCsr(other));
    assert.equal(reason, 'SubjectIsNotRequester');
    assert.match(message, /a node may only ask for its own name/);
  });

  test('organizations other than exactly system:nodes are denied', () => {
    const masters = record(
      {},
      { subject: { commonName: user, organizations: ['system:nodes', 'system:masters'] } },
    );
    assert.equal(denial(assessCsr(masters)).reason, 'SubjectOrganizationNotAllowed');
  });

  test('usages outside the Kubernetes sets are denied', () => {
    assert.equal(
      denial(assessCsr(record({ usages: ['client auth', 'server auth'] }))).reason,
      'UsagesNotAllowed',
    );
    assert.equal(
      denial(assessCsr(record({ usages: ['digital signature', 'client auth', 'client auth'] }))).reason,
      'UsagesNotAllowed',
    );
    assert.equal(denial(assessCsr(record({ ...serving, usages: clientOnly }))).reason, 'UsagesNotAllowed');
  });

  test('a client request with names is denied', () => {
    const named = record({}, { dnsNames: ['evil.example.com'] });
    assert.equal(denial(assessCsr(named)).reason, 'SubjectAltNamesNotAllowed');
  });

  test('a weak key or a broken request is denied as invalid', () => {
    const weak = generateKeyPairSync('rsa', { modulusLength: 1024 }).privateKey;
    const pem = buildCsrPem(weak, { subject: { commonName: user, organizations: ['system:nodes'] } });
    const { reason, message } = denial(assessCsr(record({ request: Buffer.from(pem).toString('base64') })));
    assert.equal(reason, 'InvalidRequest');
    assert.match(message, /RSA/);
    assert.equal(denial(assessCsr(record({ request: 'bm90IGEgcmVxdWVzdA==' }))).reason, 'InvalidRequest');
  });

  test('a serving request without names is denied; one with names asks for verification', () => {
    assert.equal(denial(assessCsr(record(serving))).reason, 'NoSubjectAltNames');
    const named = assessCsr(record(serving, { dnsNames: [node], ipAddresses: ['10.0.0.5'] }));
    assert.deepEqual(named, {
      action: 'verify-instance',
      nodeName: node,
      serving: true,
      dnsNames: [node],
      ipAddresses: ['10.0.0.5'],
    });
  });
});

const identity: NodeIdentity = {
  providerID: `aws:///us-east-1a/${node}`,
  instanceId: node,
  instanceGroup: 'nodes-us-east-1a',
  state: 'running',
  addresses: [
    { type: 'InternalIP', address: '10.0.0.5' },
    { type: 'InternalIP', address: '2001:db8::5' },
    { type: 'InternalDNS', address: 'ip-10-0-0-5.ec2.internal' },
  ],
};

describe('assessInstance', () => {
  const request = {
    nodeName: node,
    serving: true,
    dnsNames: [node, 'IP-10-0-0-5.ec2.internal'],
    ipAddresses: ['10.0.0.5'],
  };
  const renewal = { nodeName: node, serving: false, dnsNames: [], ipAddresses: [] };

  test('a renewal from a running instance of its own is approved; from a terminated one, denied', () => {
    const approved = assessInstance(renewal, identity);
    assert.equal(approved.action, 'approve');
    assert.match(
      approved.message,
      /renews its own kubelet client certificate; its instance i-0123456789abcdef0 is a running/,
    );
    assert.equal(assessInstance(renewal, { ...identity, state: 'terminated' }).reason, 'InstanceNotRunning');
  });

  test('names all of the instance are approved (DNS case-insensitive, IPv6 in any spelling)', () => {
    assert.equal(assessInstance(request, identity).action, 'approve');
    const v6 = assessInstance({ ...request, ipAddresses: ['2001:0db8:0:0::5'] }, identity);
    assert.equal(v6.action, 'approve');
  });

  test('a foreign IP or DNS name is denied, each one named', () => {
    const verdict = assessInstance(
      { ...request, dnsNames: ['api.example.com'], ipAddresses: ['10.0.0.5', '10.0.0.6'] },
      identity,
    );
    assert.equal(verdict.action, 'deny');
    assert.equal(verdict.reason, 'SubjectAltNamesNotOfInstance');
    assert.match(
      verdict.message,
      /^api\.example\.com, 10\.0\.0\.6 do not belong to instance i-0123456789abcdef0/,
    );
  });

  test('a hostname prefix is not enough (kubelet-csr-approver’s prefix match would pass it)', () => {
    const verdict = assessInstance({ ...request, dnsNames: [`${node}.attacker.example.com`] }, identity);
    assert.equal(verdict.reason, 'SubjectAltNamesNotOfInstance');
  });

  test('a node that is not a name of the instance its providerID names is denied', () => {
    const verdict = assessInstance({ ...request, nodeName: 'i-0aaaaaaaaaaaaaaa0' }, identity);
    assert.equal(verdict.reason, 'NodeIsNotItsInstance');
  });

  test("a node named after one of its instance's private addresses (kops' DigitalOcean nodes) is its instance; a public one is not", () => {
    assert.equal(assessInstance({ ...request, nodeName: '10.0.0.5' }, identity).action, 'approve');
    const withPublic: NodeIdentity = {
      ...identity,
      addresses: [...identity.addresses, { type: 'ExternalIP', address: '203.0.113.5' }],
    };
    assert.equal(
      assessInstance({ ...request, nodeName: '203.0.113.5' }, withPublic).reason,
      'NodeIsNotItsInstance',
    );
    assert.equal(
      assessInstance({ ...request, nodeName: '10.0.0.6' }, identity).reason,
      'NodeIsNotItsInstance',
    );
  });

  test('a stopped or terminated instance is denied', () => {
    for (const state of ['stopped', 'terminated'] as const) {
      assert.equal(assessInstance(request, { ...identity, state }).reason, 'InstanceNotRunning');
    }
  });
});
