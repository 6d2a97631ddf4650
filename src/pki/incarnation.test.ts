import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { test } from 'node:test';
import { InvalidInputError } from '../errors.ts';
import { openssl, opensslText, opensslVerify, scratchFile } from '../testing/openssl.ts';
import { toolPath } from '../testing/tools.ts';
import { bundlePem, createCa } from './ca.ts';
import { octetString, oid, readRoot, sequence, Tag, tlv, utf8String } from './der.ts';
import { incarnationExtension, incarnationOid } from './incarnation.ts';
import { generateKey } from './keys.ts';
import { issueCertificate, type ProfileName, publicKeyRequest } from './profiles.ts';
import { parseCertificate, parseExtensions } from './x509.ts';

const ca = createCa();
const key = generateKey('ecdsa-p256');
const gceId = '4000000000000031676';

function issue(profile: ProfileName, incarnationId?: string) {
  return issueCertificate(ca, profile, publicKeyRequest(key), {
    name: 'nodes-a-0000',
    ipAddresses: ['10.0.0.2'],
    ...(incarnationId === undefined ? {} : { incarnationId }),
  });
}

/** The extensions of a certificate holding `value` (DER) as the incarnation extension's value. */
function extensionsWith(value: Buffer) {
  return parseExtensions(readRoot(sequence(sequence(oid(incarnationOid), octetString(value)))));
}

test("a node's own certificates (kubelet, kubelet-server) issued for a machine name it in a non-critical extension: openssl prints it, Go reads the certificate, the parser returns it", () => {
  for (const profile of ['kubelet', 'kubelet-server'] as const) {
    const issued = issue(profile, gceId);
    assert.match(opensslVerify(bundlePem(ca), issued.pem), /: OK$/, profile);
    // OpenSSL prints an extension it does not know by its OID, then its bytes (tag and length as dots).
    const text = opensslText(issued.pem);
    assert.match(text, new RegExp(`${incarnationOid.replaceAll('.', '\\.')}: \\n\\s+\\.\\.${gceId}\\n`));
    assert.doesNotMatch(text, new RegExp(`${incarnationOid.replaceAll('.', '\\.')}: critical`));
    // Go's x509 (cfssl), as the API server and the kubelet read the certificate.
    const info = JSON.parse(
      execFileSync(toolPath('cfssl'), ['certinfo', '-cert', scratchFile('node.pem', issued.pem)], {
        encoding: 'utf8',
      }),
    ) as { subject: { common_name: string } };
    assert.match(info.subject.common_name, /nodes-a-0000$/, profile);
    const parsed = parseCertificate(issued.der);
    assert.equal(parsed.extensions.incarnationId, gceId, profile);
    assert.ok(!parsed.extensions.critical.includes(incarnationOid));
    assert.deepEqual(parsed.extensions.other, [], 'decoded, not listed among the unknown ones');
  }
});

/** Whether Go's x509 (cfssl) reads a self-signed certificate that openssl made with extension `oidText`. */
function goReadsExtension(oidText: string): boolean {
  const config = scratchFile(
    'ext.cnf',
    `[req]\ndistinguished_name = dn\n[dn]\n[v3]\n${oidText} = ASN1:UTF8String:i-0123456789abcdef0\n`,
  );
  const pem = openssl([
    'req',
    '-x509',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:P-256',
    '-nodes',
    '-keyout',
    scratchFile('key.pem', ''),
    '-subj',
    '/CN=x',
    '-days',
    '1',
    '-config',
    config,
    '-extensions',
    'v3',
  ]);
  const run = spawnSync(toolPath('cfssl'), ['certinfo', '-cert', scratchFile('cert.pem', pem)]);
  return run.status === 0;
}

test('every arc of the OID is below 2^31, which Go reads; Go refuses a whole certificate with a 2.25.<UUID> extension', () => {
  const arcs = incarnationOid.split('.').map(Number);
  assert.ok(
    arcs.every((arc) => Number.isSafeInteger(arc) && arc < 2 ** 31),
    incarnationOid,
  );
  assert.match(incarnationOid, /^1\.2\.840\.113556\.1\.8000\.2554\.(\d+\.){7}1$/);
  assert.equal(goReadsExtension(incarnationOid), true);
  // Why not X.667's arc: GUID 68edd11f-7b41-4e5e-a53a-a450fa2de19d as one integer.
  const uuidArc = BigInt('0x68edd11f7b414e5ea53aa450fa2de19d').toString();
  assert.equal(goReadsExtension(`2.25.${uuidArc}`), false);
});

test('no extension without an incarnation id, nor in a certificate that is no node identity of its own (kube-proxy)', () => {
  for (const issued of [issue('kubelet'), issue('kubelet-server'), issue('kube-proxy', gceId)]) {
    const parsed = parseCertificate(issued.der);
    assert.equal(parsed.extensions.incarnationId, undefined, issued.profile);
    assert.doesNotMatch(opensslText(issued.pem), /1\.2\.840\.113556\.1\.8000\.2554/, issued.profile);
  }
});

test('the ids of the clouds are written and read back as they are', () => {
  for (const id of [
    'i-0123456789abcdef0',
    gceId,
    '18446744073709551615',
    '3f2504e0-4f89-41d3-9a0c-0305e82c3301',
    '12345678',
  ]) {
    assert.equal(parseExtensions(readRoot(sequence(incarnationExtension(id)))).incarnationId, id);
  }
});

test('a value other than a UTF8String of a valid id is malformed: refused with the reason, never read as no incarnation', () => {
  const cases: [string, Buffer, RegExp][] = [
    ['an OCTET STRING', octetString(Buffer.from('i-0123')), /not a UTF8String/],
    ['a PrintableString', tlv(Tag.printableString, Buffer.from('i-0123')), /not a UTF8String/],
    ['bytes that are not UTF-8', tlv(Tag.utf8String, Buffer.from([0x69, 0xff, 0xfe])), /not UTF-8/],
    ['an empty id', utf8String(''), /it is empty/],
    ['a control character', utf8String('i-0123\nforged: yes'), /other than visible ASCII/],
    ['a space', utf8String('i-0123 i-0456'), /other than visible ASCII/],
    ['an id of 129 characters', utf8String('9'.repeat(129)), /longer than 128 characters/],
    ['no DER at all', Buffer.from([0x0c, 0x7f, 0x41]), /malformed DER/],
    ['trailing bytes', Buffer.concat([utf8String('i-0123'), Buffer.from([0])]), /malformed DER/],
  ];
  for (const [what, value, reason] of cases) {
    assert.throws(
      () => extensionsWith(value),
      (err) => err instanceof InvalidInputError && reason.test(err.message),
      what,
    );
  }
});

test('an id that could not be read back is refused before it is written', () => {
  for (const id of ['', 'a b', 'é', 'x'.repeat(129)]) {
    assert.throws(() => incarnationExtension(id), InvalidInputError, JSON.stringify(id));
  }
});
