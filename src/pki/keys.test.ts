import assert from 'node:assert/strict';
import { createPublicKey, generateKeyPairSync } from 'node:crypto';
import { test } from 'node:test';
import { InvalidInputError } from '../errors.ts';
import { openssl } from '../testing/openssl.ts';
import {
  bitString,
  bytesOf,
  childrenOf,
  contentOf,
  nullValue,
  octetString,
  oid,
  readRoot,
  sequence,
  smallInteger,
} from './der.ts';
import {
  describeKey,
  describeSpki,
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

test("describeSpki refuses what OpenSSL or Go would not read: extra fields, and parameters other than RSA's NULL and a named curve", () => {
  const rsa = spkiOf(generateKey('rsa-2048'));
  const [rsaAlgorithm, rsaBits] = childrenOf(readRoot(rsa)).map(bytesOf) as [Buffer, Buffer];
  const [modulus, exponent] = childrenOf(readRoot(contentOf(readRoot(rsaBits)).subarray(1))).map(bytesOf);
  const [ecAlgorithm, ecBits] = childrenOf(readRoot(spkiOf(generateKey('ecdsa-p256')))).map(bytesOf) as [
    Buffer,
    Buffer,
  ];
  const [, ed25519Bits] = childrenOf(readRoot(spkiOf(generateKeyPairSync('ed25519').publicKey))).map(
    bytesOf,
  ) as [Buffer, Buffer];
  const rsaEncryption = oid('1.2.840.113549.1.1.1');
  const cases: [string, Buffer][] = [
    // The fuzzing campaign's reproducers (tmp/fuzz-s11): OpenSSL cannot read any of them.
    [
      'an ECDSA P-384 SPKI with a third element',
      Buffer.from(
        '3081da301006072a8648ce3d020106052b8104002203620004537d0b01648cf0c54fd2219b8098dc69938304644065383892733271b38320e84b3b025b398c4cb643716c14d82dcb9943f51b0a17740ff089f734122b957bb751eb1dd80bc7d0038c0e5c9fefd6f66399c9738794f3074ea4445c605aee956603620004537d0b01648cf0c54fd2219b8098dc69938304644065383892733271b38320e84b3b025b398c4cb643716c14d82dcb9943f51b0a17740ff089f734122b957bb751eb1dd80bc7d0038c0e5c9fefd6f66399c9738794f3074ea4445c605aee9566',
        'hex',
      ),
    ],
    [
      'an Ed25519 key with parameters',
      Buffer.from(
        '302f300a06032b657006032b6570032100d5d3570e3b23599453e2c9fce41cea554d6e735c04bec6aa6d00c32d30bd576e',
        'hex',
      ),
    ],
    [
      'an RSA AlgorithmIdentifier of three elements',
      sequence(sequence(rsaEncryption, rsaEncryption, nullValue), rsaBits),
    ],
    ['RSA without its NULL parameters', sequence(sequence(rsaEncryption), rsaBits)],
    [
      'RSA with other parameters than NULL',
      sequence(sequence(rsaEncryption, octetString(Buffer.of(1))), rsaBits),
    ],
    [
      'an RSAPublicKey of three integers',
      sequence(rsaAlgorithm, bitString(sequence(modulus as Buffer, exponent as Buffer, smallInteger(1)))),
    ],
    [
      'an EC AlgorithmIdentifier with a third element',
      sequence(sequence(...childrenOf(readRoot(ecAlgorithm)).map(bytesOf), nullValue), ecBits),
    ],
    ['an SPKI with a third element', sequence(rsaAlgorithm, rsaBits, nullValue)],
    ['an Ed25519 key with NULL parameters', sequence(sequence(oid('1.3.101.112'), nullValue), ed25519Bits)],
  ];
  for (const [what, spki] of cases) {
    assert.throws(
      () => describeSpki(spki),
      (err) => err instanceof InvalidInputError && /^malformed DER: /.test(err.message),
      what,
    );
  }
  assert.equal(describeSpki(rsa).text, 'RSA 2048');
});
