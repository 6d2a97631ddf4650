import assert from 'node:assert/strict';
import { test } from 'node:test';
import { openssl, scratchFile } from '../testing/openssl.ts';
import { bundlePem, createCa } from './ca.ts';
import { renderSummaries, summarise } from './inspect.ts';
import { generateKey, privateKeyPem } from './keys.ts';
import { issueCertificate, publicKeyRequest } from './profiles.ts';

const ca = createCa();
const leaf = issueCertificate(ca, 'kubelet-server', publicKeyRequest(generateKey()), {
  name: 'node-a',
  ipAddresses: ['10.0.0.1'],
});

test('a certificate summary has what an admin checks, and whether the CA signed it', () => {
  const [summary] = summarise(leaf.pem, ca);
  assert.deepEqual(summary, {
    type: 'certificate',
    subject: 'CN=node-a',
    issuer: 'CN=kubernetes-ca',
    serial: leaf.serialHex,
    notBefore: leaf.notBefore.toISOString(),
    notAfter: leaf.notAfter.toISOString(),
    key: 'ECDSA P-256',
    signatureAlgorithm: 'ecdsa-with-SHA256',
    ca: false,
    keyUsage: ['digitalSignature'],
    extKeyUsage: ['serverAuth'],
    dnsNames: [],
    ipAddresses: ['10.0.0.1'],
    pin: summary?.type === 'certificate' ? summary.pin : '',
    signedByCa: true,
  });
  const [other] = summarise(leaf.pem, createCa());
  assert.equal(other?.type === 'certificate' && other.signedByCa, false);
});

test('a node certificate issued for a machine names it (the incarnation extension); one without has no such line', () => {
  const bound = issueCertificate(ca, 'kubelet', publicKeyRequest(generateKey()), {
    name: 'node-b',
    incarnationId: '4321098765432109876',
  });
  const [summary] = summarise(bound.pem);
  assert.equal(summary?.type === 'certificate' && summary.incarnation, '4321098765432109876');
  assert.match(renderSummaries(summarise(bound.pem)), /^incarnation: 4321098765432109876$/m);
  assert.doesNotMatch(renderSummaries(summarise(leaf.pem)), /incarnation/);
});

test('a bundle gives one summary per certificate; empty lists are left out of the text', () => {
  const summaries = summarise(bundlePem(ca) + leaf.pem);
  assert.deepEqual(
    summaries.map((s) => s.type),
    ['certificate', 'certificate'],
  );
  const text = renderSummaries(summaries);
  assert.match(text, /^type: certificate\nsubject: CN=kubernetes-ca\n/);
  assert.match(text, /\n\ntype: certificate\nsubject: CN=node-a\n/);
  assert.doesNotMatch(text, /dns names/);
});

test('a request summary comes only after every request check passed', () => {
  const csr = openssl([
    'req',
    '-new',
    '-newkey',
    'ed25519',
    '-nodes',
    '-keyout',
    scratchFile('k', ''),
    '-subj',
    '/CN=node-a',
  ]);
  assert.deepEqual(summarise(csr)[0], {
    type: 'certificate-request',
    subject: 'CN=node-a',
    key: 'Ed25519',
    signatureAlgorithm: 'Ed25519',
    signature: 'valid',
    keyUsage: [],
    extKeyUsage: [],
    dnsNames: [],
    ipAddresses: [],
  });
});

test('other PEM blocks and non-PEM input are refused', () => {
  assert.throws(() => summarise(privateKeyPem(generateKey())), /cannot inspect a EC PRIVATE KEY/);
  assert.throws(() => summarise('hello'), /no PEM block found/);
});
