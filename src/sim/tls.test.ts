import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { test } from 'node:test';
import {
  createCertificateAuthority,
  createCertificateRequest,
  issueClientCertificate,
  issueServingCertificate,
} from './tls.ts';

test('issues a loopback serving certificate chained to the CA', async () => {
  const ca = await createCertificateAuthority('test-ca');
  const serving = await issueServingCertificate(ca, ['sim.example']);
  const caCert = new X509Certificate(ca.certificate);
  const cert = new X509Certificate(serving.certificate);
  assert.equal(caCert.ca, true);
  assert.ok(cert.checkIssued(caCert));
  assert.ok(cert.verify(caCert.publicKey));
  assert.equal(
    cert.subjectAltName,
    'DNS:localhost, IP Address:127.0.0.1, IP Address:0:0:0:0:0:0:0:1, DNS:sim.example',
  );
  assert.match(serving.privateKey, /^-----BEGIN PRIVATE KEY-----/);
});

test('issues client certificates carrying user and groups', async () => {
  const ca = await createCertificateAuthority();
  const client = await issueClientCertificate(ca, {
    name: 'system:node:a',
    groups: ['system:nodes', 'extra'],
  });
  const cert = new X509Certificate(client.certificate);
  assert.equal(cert.subject, 'CN=system:node:a\nO=system:nodes\nO=extra');
  assert.ok(cert.checkIssued(new X509Certificate(ca.certificate)));
});

test('creates PKCS#10 requests for an identity', async () => {
  const { csr, privateKey } = await createCertificateRequest({
    name: 'system:node:b',
    groups: ['system:nodes'],
  });
  assert.match(csr, /^-----BEGIN CERTIFICATE REQUEST-----/);
  assert.match(privateKey, /^-----BEGIN PRIVATE KEY-----/);
});
