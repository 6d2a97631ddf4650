import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { openssl, opensslStatus, scratchFile } from '../testing/openssl.ts';
import { parseCsr } from './csr.ts';
import { buildCsrPem } from './csr-build.ts';
import { generateKey } from './keys.ts';
import { decodePem, encodePem } from './pem.ts';

const nodeSubject = { commonName: 'system:node:node-a', organizations: ['system:nodes'] };

describe('buildCsrPem', () => {
  test('an ECDSA P-256 request without names verifies with openssl and parses back', () => {
    const pem = buildCsrPem(generateKey('ecdsa-p256'), { subject: nodeSubject });
    const check = opensslStatus(['req', '-verify', '-noout', '-in', scratchFile('a.csr', pem)]);
    assert.match(check.stderr, /self-signature verify OK/);
    const parsed = parseCsr(pem);
    assert.equal(parsed.subject.text, 'O=system:nodes, CN=system:node:node-a');
    assert.equal(parsed.signatureAlgorithm, 'ecdsa-with-SHA256');
    assert.equal(parsed.extensions.subjectAltName, undefined);
  });

  test('requested DNS names and IP addresses land in the extensionRequest', () => {
    const pem = buildCsrPem(generateKey('rsa-2048'), {
      subject: nodeSubject,
      dnsNames: ['node-a.internal'],
      ipAddresses: ['10.0.0.7', '2001:db8::1'],
    });
    const text = openssl(['req', '-noout', '-text', '-in', scratchFile('b.csr', pem)]);
    const check = opensslStatus(['req', '-verify', '-noout', '-in', scratchFile('b.csr', pem)]);
    assert.match(check.stderr, /self-signature verify OK/);
    assert.match(text, /DNS:node-a\.internal, IP Address:10\.0\.0\.7, IP Address:2001:DB8:0:0:0:0:0:1/);
    const parsed = parseCsr(pem);
    assert.deepEqual(parsed.extensions.subjectAltName?.dnsNames, ['node-a.internal']);
    assert.deepEqual(parsed.extensions.subjectAltName?.ipAddresses, ['10.0.0.7', '2001:db8::1']);
    assert.equal(parsed.signatureAlgorithm, 'sha256WithRSAEncryption');
  });

  test('a request altered after signing is refused by openssl and by parseCsr', () => {
    const pem = buildCsrPem(generateKey(), { subject: nodeSubject });
    const der = decodePem(pem, 'CERTIFICATE REQUEST')[0] as Buffer;
    const at = der.indexOf('system:node:node-a') + 'system:node:node-'.length;
    der[at] = 'b'.charCodeAt(0);
    const tampered = encodePem('CERTIFICATE REQUEST', der);
    const check = opensslStatus(['req', '-verify', '-noout', '-in', scratchFile('c.csr', tampered)]);
    // openssl 3.0 exits 0 either way; its verdict is on standard error.
    assert.match(check.stderr, /self-signature verify failure/);
    assert.throws(() => parseCsr(tampered), /signature does not verify/);
  });
});
