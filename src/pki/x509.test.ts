import assert from 'node:assert/strict';
import { test } from 'node:test';
import { openssl, scratchFile } from '../testing/openssl.ts';
import { readRoot, sequence } from './der.ts';
import { decodePem } from './pem.ts';
import {
  basicConstraintsExtension,
  encodeName,
  parseCertificate,
  parseExtensions,
  parseName,
  subjectAltNameExtension,
} from './x509.ts';

test('names encode as Go writes them and parse back', () => {
  const name = parseName(
    readRoot(encodeName({ commonName: 'system:node:a', organizations: ['system:nodes', 'x'] })),
  );
  assert.equal(name.text, 'O=system:nodes, O=x, CN=system:node:a');
  assert.equal(name.commonName, 'system:node:a');
  assert.deepEqual(name.organizations, ['system:nodes', 'x']);
});

test('certificates made by openssl parse: names, validity, serial, extensions', () => {
  const pem = openssl([
    'req',
    '-x509',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:P-256',
    '-nodes',
    '-keyout',
    scratchFile('k', ''),
    '-subj',
    '/C=DE/O=acme/CN=api',
    '-days',
    '2',
    '-set_serial',
    '0x0102',
    '-addext',
    'subjectAltName=DNS:api.example.com,IP:192.0.2.1,email:a@example.com,URI:spiffe://td/x',
    '-addext',
    'extendedKeyUsage=serverAuth,clientAuth',
    '-addext',
    'keyUsage=critical,digitalSignature,keyAgreement',
  ]);
  const parsed = parseCertificate(decodePem(pem, 'CERTIFICATE')[0] as Buffer);
  assert.equal(parsed.subject.text, 'C=DE, O=acme, CN=api');
  assert.equal(parsed.issuer.text, 'C=DE, O=acme, CN=api');
  assert.equal(parsed.serialHex, '0102');
  assert.equal(parsed.serialDecimal, '258');
  assert.equal(Math.round((parsed.notAfter.getTime() - parsed.notBefore.getTime()) / 86_400_000), 2);
  assert.deepEqual(parsed.extensions.subjectAltName, {
    dnsNames: ['api.example.com'],
    ipAddresses: ['192.0.2.1'],
    emails: ['a@example.com'],
    uris: ['spiffe://td/x'],
    other: 0,
  });
  assert.deepEqual(parsed.extensions.extKeyUsage, ['serverAuth', 'clientAuth']);
  assert.deepEqual(parsed.extensions.keyUsage, ['digitalSignature', 'keyAgreement']);
  assert.ok(parsed.extensions.critical.includes('2.5.29.15'));
  assert.equal(parsed.extensions.subjectKeyIdentifier?.length, 20);
});

test('extensions this CA writes decode to what was written; duplicates are malformed', () => {
  const extensions = sequence(
    basicConstraintsExtension(true, 0),
    subjectAltNameExtension({ dnsNames: ['a.example'], ipAddresses: ['::1'] }, true),
  );
  const parsed = parseExtensions(readRoot(extensions));
  assert.deepEqual(parsed.basicConstraints, { ca: true, pathLength: 0 });
  assert.deepEqual(parsed.subjectAltName?.ipAddresses, ['::1']);
  assert.deepEqual(parsed.critical, ['2.5.29.19', '2.5.29.17']);
  const duplicated = sequence(basicConstraintsExtension(false), basicConstraintsExtension(false));
  assert.throws(() => parseExtensions(readRoot(duplicated)), /appears twice/);
});
