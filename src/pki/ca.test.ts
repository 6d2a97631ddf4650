import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { InvalidInputError } from '../errors.ts';
import { opensslText, opensslVerify } from '../testing/openssl.ts';
import { bundlePem, caFromPem, createCa, createCaKeypair, kopsStyleSerial, rotateCa } from './ca.ts';
import { generateKey, keyAlgorithms } from './keys.ts';
import { issueCertificate, publicKeyRequest } from './profiles.ts';

const publicKey = publicKeyRequest(generateKey());

describe('new CAs, for every supported key type, pass openssl', () => {
  for (const algorithm of keyAlgorithms) {
    test(algorithm, () => {
      const ca = createCa({ algorithm });
      const pem = ca.signer.certificate.pem;
      assert.match(opensslVerify(pem, pem), /: OK$/);
      const text = opensslText(pem);
      assert.match(text, /Subject: CN = kubernetes-ca\n/);
      assert.match(text, /X509v3 Basic Constraints: critical\n\s+CA:TRUE, pathlen:0\n/);
      assert.match(text, /X509v3 Key Usage: critical\n\s+Digital Signature, Certificate Sign, CRL Sign\n/);
      const bits = algorithm.startsWith('rsa')
        ? `${algorithm.slice(4)} bit`
        : algorithm === 'ecdsa-p256'
          ? '256 bit'
          : '384 bit';
      assert.match(text, new RegExp(`Public-Key: \\(${bits}\\)`));
      const issued = issueCertificate(ca, 'kubelet', publicKey, { name: 'node-a' });
      assert.match(opensslVerify(bundlePem(ca), issued.pem, 'sslclient'), /: OK$/);
    });
  }
});

test('the keypair id is the serial, built like kops: newer CAs compare higher', () => {
  const older = createCaKeypair({ now: new Date('2025-01-01T00:00:00Z') });
  const newer = createCaKeypair({ now: new Date('2025-06-01T00:00:00Z') });
  assert.equal(older.certificate.keypairId, older.certificate.parsed.serialDecimal);
  assert.ok(BigInt(older.certificate.keypairId) < BigInt(newer.certificate.keypairId));
  assert.equal(kopsStyleSerial(new Date(1000)) >> 32n, 1_000_000_000n);
});

test('the CA lifetime defaults to ten years and follows the option', () => {
  const now = new Date();
  const ca = createCa({ now, lifetimeMs: 3600_000 });
  assert.equal(
    ca.signer.certificate.parsed.notAfter.getTime(),
    Math.floor(now.getTime() / 1000) * 1000 + 3600_000,
  );
  const years =
    (createCa({ now }).signer.certificate.parsed.notAfter.getTime() - now.getTime()) / (365 * 86400_000);
  assert.ok(years > 9.99 && years < 10.01);
});

describe('loading a CA from PEM', () => {
  const { certificate, key } = createCaKeypair();

  test('the key picks the signer among the bundle, which keeps every certificate', () => {
    const other = createCaKeypair({ name: 'other-ca' });
    const ca = caFromPem(other.certificate.pem + certificate.pem, key);
    assert.equal(ca.signer.certificate.pem, certificate.pem);
    assert.deepEqual(
      ca.certificates.map((c) => c.pem),
      [certificate.pem, other.certificate.pem],
    );
  });

  test('a key that matches no certificate is refused', () => {
    assert.throws(() => caFromPem(certificate.pem, generateKey()), /matches none of the certificates/);
  });

  test('a leaf certificate is not a CA', () => {
    const leaf = issueCertificate(createCa(), 'kubelet', publicKey, { name: 'node-a' });
    assert.throws(() => caFromPem(leaf.pem, generateKey()), /is not a CA/);
  });

  test('an expired CA cannot sign', () => {
    const old = createCaKeypair({ now: new Date('2020-01-01T00:00:00Z'), lifetimeMs: 3600_000 });
    assert.throws(
      () => caFromPem(old.certificate.pem, old.key),
      /expired on 2020-01-01T01:00:00.000Z; rotate the CA/,
    );
  });

  test('a bundle without certificates is refused', () => {
    assert.throws(() => caFromPem('not pem', key), InvalidInputError);
  });
});

test('rotation: the new CA signs, and certificates from the old one still verify against the bundle', () => {
  const before = createCa();
  const oldLeaf = issueCertificate(before, 'kubelet', publicKey, { name: 'node-a' });
  const after = rotateCa(before);
  const newLeaf = issueCertificate(after, 'kubelet', publicKey, { name: 'node-a' });
  assert.notEqual(after.signer.certificate.keypairId, before.signer.certificate.keypairId);
  assert.equal(after.certificates.length, 2);
  assert.equal(after.certificates[1]?.pem, before.signer.certificate.pem);
  assert.match(opensslVerify(bundlePem(after), oldLeaf.pem), /: OK$/);
  assert.match(opensslVerify(bundlePem(after), newLeaf.pem), /: OK$/);
  assert.throws(() => opensslVerify(before.signer.certificate.pem, newLeaf.pem));
});
