import assert from 'node:assert/strict';
import { createPublicKey, generateKeyPairSync } from 'node:crypto';
import { test } from 'node:test';
import { InvalidInputError } from '../errors.ts';
import { openssl } from '../testing/openssl.ts';
import {
  describeKey,
  generateKey,
  keyPolicyViolation,
  parsePrivateKeyPem,
  privateKeyPem,
  publicKeyFromSpki,
  signatureSchemeFor,
  spkiOf,
} from './keys.ts';

test('private keys are written in the forms kops and openssl write: PKCS#1 for RSA, SEC 1 for ECDSA', () => {
  const rsa = privateKeyPem(generateKey('rsa-2048'));
  const ec = privateKeyPem(generateKey('ecdsa-p256'));
  assert.match(rsa, /^-----BEGIN RSA PRIVATE KEY-----\n/);
  assert.match(ec, /^-----BEGIN EC PRIVATE KEY-----\n/);
  assert.match(openssl(['pkey', '-noout', '-text'], ec), /ASN1 OID: prime256v1/);
  assert.equal(describeKey(parsePrivateKeyPem(rsa)).text, 'RSA 2048');
});

test('encrypted and garbled private keys are refused with the reason', () => {
  assert.throws(
    () => parsePrivateKeyPem('-----BEGIN ENCRYPTED PRIVATE KEY-----\n...'),
    /encrypted private keys are not supported/,
  );
  assert.throws(
    () => parsePrivateKeyPem('nonsense', 'ca.key'),
    (err: unknown) => err instanceof InvalidInputError && /^ca\.key: not a PEM private key/.test(err.message),
  );
});

test('the key policy: RSA 2048+ with e=65537, the NIST curves, Ed25519', () => {
  const publicOf = (key: ReturnType<typeof generateKey>) => createPublicKey(key);
  assert.equal(keyPolicyViolation(describeKey(publicOf(generateKey('ecdsa-p256')))), undefined);
  assert.equal(keyPolicyViolation(describeKey(publicOf(generateKey('rsa-2048')))), undefined);
  assert.equal(keyPolicyViolation(describeKey(generateKeyPairSync('ed25519').publicKey)), undefined);
  assert.equal(
    keyPolicyViolation(describeKey(generateKeyPairSync('ec', { namedCurve: 'P-521' }).publicKey)),
    undefined,
  );
  assert.match(
    keyPolicyViolation(describeKey(generateKeyPairSync('rsa', { modulusLength: 1024 }).publicKey)) ?? '',
    /1024 bits is too weak/,
  );
  assert.match(
    keyPolicyViolation(
      describeKey(generateKeyPairSync('rsa', { modulusLength: 2048, publicExponent: 3 }).publicKey),
    ) ?? '',
    /exponent 3/,
  );
  assert.match(
    keyPolicyViolation(describeKey(generateKeyPairSync('ec', { namedCurve: 'secp256k1' }).publicKey)) ?? '',
    /secp256k1 is not accepted/,
  );
  assert.match(
    keyPolicyViolation(describeKey(generateKeyPairSync('x25519').publicKey)) ?? '',
    /key type 1\.3\.101\.110 is not accepted/,
  );
});

test('CA keys sign with a hash sized to the key', () => {
  assert.equal(signatureSchemeFor(generateKey('ecdsa-p256')).name, 'ecdsa-with-SHA256');
  assert.equal(signatureSchemeFor(generateKey('ecdsa-p384')).name, 'ecdsa-with-SHA384');
  assert.equal(signatureSchemeFor(generateKey('rsa-3072')).name, 'sha256WithRSAEncryption');
  assert.throws(
    () => signatureSchemeFor(generateKeyPairSync('ed25519').privateKey),
    /cannot sign certificates/,
  );
});

test('a DER SubjectPublicKeyInfo reads back as the same key, and garbage is refused with the reason', () => {
  const keys = [
    generateKey('rsa-2048'),
    generateKey('ecdsa-p256'),
    generateKey('ecdsa-p384'),
    generateKeyPairSync('ed25519').privateKey,
  ];
  for (const key of keys) {
    const spki = spkiOf(key);
    assert.deepEqual(publicKeyFromSpki(spki).export({ format: 'der', type: 'spki' }), spki);
  }
  const spki = spkiOf(generateKey('ecdsa-p256'));
  for (const bad of [Buffer.alloc(0), spki.subarray(0, spki.length - 1), Buffer.from('not a key')]) {
    assert.throws(
      () => publicKeyFromSpki(bad),
      (err) => err instanceof InvalidInputError && /unreadable public key/.test(err.message),
    );
  }
});
