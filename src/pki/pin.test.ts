import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { InvalidInputError } from '../errors.ts';
import { createCa } from './ca.ts';
import { decodePem } from './pem.ts';
import { parsePin, pinOfCertificatePem, pinOfSpki, spkiMatchesPins } from './pin.ts';
import { parseCertificate } from './x509.ts';

const fixture = (name: string) => readFileSync(new URL(`testdata/${name}`, import.meta.url), 'utf8');
const kubeadmCert = fixture('kubeadm-keypins-test.crt');
const kubeadmCert2 = fixture('kubeadm-keypins-test2.crt');
const kubeadmPin = 'sha256:345959acb2c3b2feb87d281961c893f62a314207ef02599f1cc4a5fb255480b3';
const spkiOf = (pem: string) => parseCertificate(decodePem(pem, 'CERTIFICATE')[0] as Buffer).spki;

test("kubeadm's pin test vector: the same pin for the same certificate", () => {
  assert.equal(pinOfCertificatePem(kubeadmCert), kubeadmPin);
});

test("kubeadm's second certificate does not match the first pin; upper case pins are accepted", () => {
  assert.equal(
    spkiMatchesPins(spkiOf(kubeadmCert), [kubeadmPin.toUpperCase().replace('SHA256', 'sha256')]),
    true,
  );
  assert.equal(spkiMatchesPins(spkiOf(kubeadmCert2), [kubeadmPin]), false);
  assert.equal(spkiMatchesPins(spkiOf(kubeadmCert2), [kubeadmPin, pinOfCertificatePem(kubeadmCert2)]), true);
});

test('malformed pins are refused: junk, too short, too long, wrong algorithm', () => {
  for (const bad of [
    'xyz',
    'sha256:0011223344',
    kubeadmPin + kubeadmPin.slice(7),
    'md5:' + 'a'.repeat(64),
    kubeadmPin.slice(7),
  ]) {
    assert.throws(() => parsePin(bad), InvalidInputError, bad);
  }
  assert.equal(parsePin(kubeadmPin.toUpperCase().replace('SHA256', 'sha256')).length, 32);
});

test('the pin of a new CA equals openssl x509 -pubkey | openssl pkey -pubin -outform der | sha256', () => {
  for (const algorithm of ['ecdsa-p256', 'rsa-2048'] as const) {
    const ca = createCa({ algorithm });
    const digest = execFileSync(
      'sh',
      ['-c', 'openssl x509 -pubkey -noout | openssl pkey -pubin -outform der | openssl dgst -sha256 -r'],
      { input: ca.signer.certificate.pem, encoding: 'utf8' },
    ).split(' ')[0];
    assert.equal(pinOfSpki(ca.signer.certificate.parsed.spki), `sha256:${digest}`);
  }
});
