import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { parse } from 'yaml';
import { InvalidInputError } from '../errors.ts';
import { opensslVerify } from '../testing/openssl.ts';
import { bundlePem, createCa, rotateCa } from './ca.ts';
import { generateKey } from './keys.ts';
import { caFromKeyset, keypairIdOlder, keysetOf, keysetPath } from './keyset.ts';
import { issueCertificate, publicKeyRequest } from './profiles.ts';

const fixture = (name: string) => readFileSync(new URL(`testdata/${name}`, import.meta.url), 'utf8');
const keysetYaml = fixture('keyset.yaml');
const publicKey = publicKeyRequest(generateKey());

test('kops keysets live at pki/private/<name>/keyset.yaml', () => {
  assert.equal(keysetPath('kubernetes-ca'), 'pki/private/kubernetes-ca/keyset.yaml');
});

test('a kops keyset loads: the primary signs, trusted items form the bundle, distrusted ones are left out', () => {
  const ca = caFromKeyset(keysetYaml);
  assert.equal(ca.name, 'kubernetes-ca');
  assert.equal(ca.signer.certificate.keypairId, '7371183425613924012183764000');
  assert.deepEqual(
    ca.certificates.map((c) => c.keypairId),
    ['7371183425613924012183764000', '6982820025135291416230495506'],
  );
  assert.equal(ca.certificates[0]?.pem, fixture('keyset-primary-ca.crt'));
  assert.equal(ca.certificates[1]?.pem, fixture('keyset-old-ca.crt'));
  assert.equal(bundlePem(ca).includes(fixture('keyset-distrusted-ca.crt')), false);
  const issued = issueCertificate(ca, 'kubelet', publicKey, { name: 'node-a' });
  assert.match(opensslVerify(fixture('keyset-primary-ca.crt'), issued.pem), /: OK$/);
});

test('the legacy kops/v1alpha2 group and JSON encoding are read too', () => {
  const legacy = keysetYaml.replace('apiVersion: kops.k8s.io/v1alpha2', 'apiVersion: kops/v1alpha2');
  assert.equal(caFromKeyset(legacy).signer.certificate.keypairId, '7371183425613924012183764000');
  assert.equal(caFromKeyset(JSON.stringify(parse(keysetYaml))).certificates.length, 2);
});

test('keysets that cannot sign are refused with the reason', () => {
  const noPrimaryKey = keysetYaml.replace(/^ *privateMaterial: .*\n/m, '');
  assert.throws(
    () => caFromKeyset(noPrimaryKey),
    /primary keypair "7371183425613924012183764000" must be present/,
  );
  const wrongKind = keysetYaml.replace('kind: Keyset', 'kind: Cluster');
  assert.throws(
    () => caFromKeyset(wrongKind, { source: 's3://b/c/keyset.yaml' }),
    /s3:\/\/b\/c\/keyset.yaml: not a kops Keyset: kind/,
  );
  assert.throws(() => caFromKeyset('{ nope'), InvalidInputError);
  const missingPrimary = keysetYaml.replace(/primaryId: .*/, 'primaryId: "1"');
  assert.throws(() => caFromKeyset(missingPrimary), /primary keypair "1"/);
});

test('keysetOf writes what caFromKeyset reads, oldest item first, the signer as primary', () => {
  const rotated = rotateCa(createCa({ algorithm: 'ecdsa-p256' }));
  const text = keysetOf(rotated);
  const raw = parse(text);
  assert.equal(raw.kind, 'Keyset');
  assert.equal(raw.spec.type, 'Keypair');
  assert.equal(raw.spec.primaryId, rotated.signer.certificate.keypairId);
  assert.equal(raw.spec.keys.length, 2);
  assert.equal(raw.spec.keys[0].privateMaterial, undefined, 'only the signer carries a private key');
  assert.equal(raw.spec.keys[1].id, rotated.signer.certificate.keypairId);
  const loaded = caFromKeyset(text);
  assert.deepEqual(
    loaded.certificates.map((c) => c.pem),
    rotated.certificates.map((c) => c.pem),
  );
});

test('keypair ids order as kops orders them: numerically, numbers after names', () => {
  assert.equal(keypairIdOlder('9', '10'), true);
  assert.equal(keypairIdOlder('10', '9'), false);
  assert.equal(keypairIdOlder('abc', '1'), true);
  assert.equal(keypairIdOlder('1', 'abc'), false);
  assert.equal(keypairIdOlder('a', 'b'), true);
});
