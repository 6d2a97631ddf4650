import assert from 'node:assert/strict';
import { test } from 'node:test';
import { InvalidInputError } from '../errors.ts';
import { openssl, scratchFile } from '../testing/openssl.ts';
import { createCa } from './ca.ts';
import {
  bitString,
  boolean,
  bytesOf,
  childrenOf,
  nullValue,
  octetString,
  readRoot,
  sequence,
  set,
  time,
} from './der.ts';
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

test('a name attribute of three parts is malformed, its third part not ignored', () => {
  // As the fuzzing campaign's reproducer (tmp/fuzz-s11): a BOOLEAN after the common name.
  const [organization, commonName] = childrenOf(
    readRoot(encodeName({ commonName: 'system:node:a', organizations: ['system:nodes'] })),
  ).map(bytesOf) as [Buffer, Buffer];
  const [attribute] = childrenOf(readRoot(commonName)).map(bytesOf) as [Buffer];
  const three = set(sequence(...childrenOf(readRoot(attribute)).map(bytesOf), boolean(true)));
  assert.throws(
    () => parseName(readRoot(sequence(organization, three))),
    (err) =>
      err instanceof InvalidInputError &&
      /malformed DER: name attribute has 1 fields too many/.test(err.message),
  );
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

test('a certificate without its signature, with fields after it, or with a validity of other than two times is malformed, never a TypeError', () => {
  const der = createCa().signer.certificate.parsed.der;
  const [tbs, algorithm, signature] = childrenOf(readRoot(der)).map(bytesOf) as [Buffer, Buffer, Buffer];
  const tbsFields = childrenOf(readRoot(tbs)).map(bytesOf);
  /** The certificate with its validity (the fifth field of a v3 tbsCertificate) made of `times`. */
  const withValidity = (...times: Buffer[]) =>
    sequence(
      sequence(...tbsFields.map((field, i) => (i === 4 ? sequence(...times) : field))),
      algorithm,
      signature,
    );
  const now = new Date();
  const cases: [string, Buffer, RegExp][] = [
    // The fuzzing campaign's reproducers (tmp/fuzz-s11) were of the first two kinds.
    ['an empty validity', withValidity(), /notBefore is missing/],
    ['no signature', sequence(tbs, algorithm), /signature is missing/],
    [
      'a field after the signature',
      sequence(tbs, algorithm, signature, nullValue),
      /certificate has 1 fields too many/,
    ],
    [
      'a signature that is not a BIT STRING',
      sequence(tbs, algorithm, octetString(Buffer.of(1))),
      /signature has tag 0x4/,
    ],
    ['a validity of one time', withValidity(time(now)), /notAfter is missing/],
    [
      'a validity of three times',
      withValidity(time(now), time(now), time(now)),
      /validity has 1 fields too many/,
    ],
    [
      'a signature with unused bits',
      sequence(tbs, algorithm, bitString(Buffer.alloc(0)).fill(1, 2)),
      /unused bits/,
    ],
  ];
  for (const [what, bad, message] of cases) {
    assert.throws(
      () => parseCertificate(bad),
      (err) =>
        err instanceof InvalidInputError && /^malformed DER: /.test(err.message) && message.test(err.message),
      what,
    );
  }
  assert.equal(
    parseCertificate(withValidity(time(now), time(now))).notAfter.getTime(),
    Math.floor(now.getTime() / 1000) * 1000,
  );
});
