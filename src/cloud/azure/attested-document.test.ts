import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { before, test } from 'node:test';
import {
  type AttestationAuthority,
  createAttestationAuthority,
  issueAttestationSigner,
  signAttestedContent,
} from '../../sim/azure/attestation.ts';
import {
  AttestedDocumentVerifier,
  formatAttestedTime,
  nonceForBody,
  parseAttestedTime,
} from './attested-document.ts';

let authority: AttestationAuthority;
const body = Buffer.from('{"request":1}');
// The simulated certificates are valid from an hour ago; whole seconds, as IMDS writes them.
const now = new Date(Math.floor(Date.now() / 1000) * 1000);

before(async () => {
  authority = await createAttestationAuthority();
});

function content(overrides: Record<string, unknown> = {}) {
  return {
    nonce: nonceForBody(body),
    vmId: '11111111-2222-3333-4444-555555555555',
    subscriptionId: 'sub',
    timeStamp: {
      createdOn: formatAttestedTime(now),
      expiresOn: formatAttestedTime(new Date(now.getTime() + 6 * 3_600_000)),
    },
    ...overrides,
  };
}

function verifier(options: { intermediates?: string[] } = {}) {
  return new AttestedDocumentVerifier({ roots: [authority.rootPem], now: () => now, ...options });
}

test("the nonce is kops': the first 32 hex digits of the body's SHA-256", () => {
  assert.equal(nonceForBody(body), createHash('sha256').update(body).digest('hex').slice(0, 32));
});

test("IMDS's time format parses with its offset, and rejects malformed or rolled-over dates", () => {
  assert.equal(parseAttestedTime('03/01/26 12:00:00 -0000')?.toISOString(), '2026-03-01T12:00:00.000Z');
  assert.equal(parseAttestedTime('03/01/26 14:30:00 +0230')?.toISOString(), '2026-03-01T12:00:00.000Z');
  for (const bad of [
    '2026-03-01T12:00:00Z',
    '02/31/26 00:00:00 -0000',
    '13/01/26 00:00:00 -0000',
    5,
    undefined,
  ]) {
    assert.equal(parseAttestedTime(bad), undefined, String(bad));
  }
  assert.equal(formatAttestedTime(new Date('2026-03-01T12:00:00Z')), '03/01/26 12:00:00 -0000');
});

test('a document carrying only its leaf verifies when the issuing CA is configured, not otherwise', async () => {
  const leafOnly = await signAttestedContent(content(), authority.signer, 'leaf');
  await assert.rejects(verifier().verify(leafOnly, body), /does not chain to a trusted root/);
  const document = await verifier({ intermediates: [authority.issuingPem] }).verify(leafOnly, body);
  assert.equal(document.vmId, '11111111-2222-3333-4444-555555555555');
  assert.deepEqual(document.signerNames, ['eastus.metadata.azure.com']);
});

test('content without vmId, subscription or createdOn, or with incoherent times, is rejected', async () => {
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ vmId: '' }, /names no vmId/],
    [{ subscriptionId: undefined }, /names no subscriptionId/],
    [{ timeStamp: {} }, /createdOn is missing/],
    [{ timeStamp: { createdOn: formatAttestedTime(new Date(now.getTime() + 5 * 60_000)) } }, /in the future/],
    [
      {
        timeStamp: {
          createdOn: formatAttestedTime(now),
          expiresOn: formatAttestedTime(new Date(now.getTime() - 1000)),
        },
      },
      /expires before it was created/,
    ],
    [{ timeStamp: { createdOn: formatAttestedTime(now), expiresOn: 'tomorrow' } }, /expiresOn is malformed/],
  ];
  for (const [overrides, reason] of cases) {
    const signature = await signAttestedContent(content(overrides), authority.signer);
    await assert.rejects(verifier().verify(signature, body), reason);
  }
  const notJson = await signAttestedContent('not json', authority.signer);
  await assert.rejects(verifier().verify(notJson, body), /not an object|not JSON/);
});

test('every rejection is an UnauthenticatedError (a bad proof, never a fault)', async () => {
  await assert.rejects(verifier().verify('', body), { name: 'UnauthenticatedError' });
});

test('attack: bytes after the ContentInfo are rejected, not ignored: a proof has one spelling', async () => {
  const document = Buffer.from(await signAttestedContent(content(), authority.signer), 'base64');
  await verifier().verify(document.toString('base64'), body);
  // The fuzzing campaign's reproducer (tmp/fuzz-s11) appended four bytes.
  const padded = Buffer.concat([document, Buffer.from('00000000', 'hex')]).toString('base64');
  await assert.rejects(verifier().verify(padded, body), {
    name: 'UnauthenticatedError',
    message: /not a PKCS#7 SignedData: 4 bytes after it/,
  });
});

test('a signer certificate pkijs reads but OpenSSL does not is a rejection naming it, not an OpenSSL error', async () => {
  const document = Buffer.from(await signAttestedContent(content(), authority.signer), 'base64');
  // The certificate's own signature algorithm, followed by its signature (a BIT STRING): its NULL
  // parameters made an empty BOOLEAN, as in the fuzzing campaign's reproducer (tmp/fuzz-s11). The
  // document's signature does not cover the certificate, so it still verifies.
  const algorithm = Buffer.from('300d06092a864886f70d01010b050003', 'hex');
  const at = document.indexOf(algorithm);
  assert.ok(at > 0);
  document[at + algorithm.length - 3] = 0x01;
  await assert.rejects(verifier().verify(document.toString('base64'), body), {
    name: 'UnauthenticatedError',
    message: /attested document rejected: the signer certificate is unreadable/,
  });
});

test("attack: a signer of someone else's names is refused naming a few of them, quoted and cut, never all of them", async () => {
  // A self-made signer may carry a 16 KiB header's worth of names; the refusal reaches the audit trail.
  const names = Array.from({ length: 60 }, (_, i) => `${i}-${'n'.repeat(200)}.example`);
  const signer = await issueAttestationSigner(authority.issuing, names);
  const document = await signAttestedContent(content(), signer, 'leaf');
  await assert.rejects(verifier().verify(document, body), (err: Error) => {
    assert.match(
      err.message,
      /is not Azure's metadata service \(60 names: "0-n+"… \(210 characters\), "1-n+"… \(210 characters\), "2-n+"… \(210 characters\), …\)/,
    );
    assert.ok(err.message.length < 500, `${err.message.length} characters`);
    return true;
  });
  const one = await issueAttestationSigner(authority.issuing, ['vm.example.com']);
  await assert.rejects(
    verifier().verify(await signAttestedContent(content(), one, 'leaf'), body),
    /is not Azure's metadata service \(names: "vm\.example\.com"\)/,
  );
  const none = await issueAttestationSigner(authority.issuing, []);
  await assert.rejects(
    verifier().verify(await signAttestedContent(content(), none, 'leaf'), body),
    /is not Azure's metadata service \(names: none\)/,
  );
});
