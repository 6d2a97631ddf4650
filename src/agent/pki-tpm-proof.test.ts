import assert from 'node:assert/strict';
import { createHash, createPublicKey, generateKeyPairSync, verify } from 'node:crypto';
import { test } from 'node:test';
import { decodePkiTpmToken } from '../cloud/metal/pki-tpm-token.ts';
import { privateKeyPem } from '../pki/keys.ts';
import { pkiTpmProof, pkiTpmProofFromFile } from './pki-tpm-proof.ts';

const key = generateKeyPairSync('ec', { namedCurve: 'prime256v1' }).privateKey;
const publicPem = createPublicKey(key).export({ format: 'pem', type: 'spki' }).toString();
const at = new Date('2026-03-01T12:00:00.900Z');

test("signs the record exactly as nodeup's pkiAuthenticator marshals it, with an ECDSA DER signature", async () => {
  const body = Buffer.from('{"certs":{}}');
  const header = await pkiTpmProof({ keyPem: privateKeyPem(key), hostname: 'metal-1', now: () => at })(body);
  assert.ok(header?.startsWith('x-pki-tpm '));
  const token = (header ?? '').slice('x-pki-tpm '.length);
  const outer = JSON.parse(Buffer.from(token, 'base64').toString()) as Record<string, string>;
  // Go's json.Marshal(AuthToken{Signature, Data}): signature first, both []byte as standard base64.
  assert.deepEqual(Object.keys(outer), ['signature', 'data']);
  const data = Buffer.from(outer['data'] as string, 'base64').toString();
  const hash = createHash('sha256').update(body).digest('base64');
  assert.equal(
    data,
    `{"instance":"metal-1","keyID":${JSON.stringify(publicPem)},"requestHash":"${hash}","timestamp":1772366400,"audience":"kops.k8s.io/node-bootstrap"}`,
  );
  const decoded = decodePkiTpmToken(token);
  assert.ok(verify('sha256', decoded.dataBytes, createPublicKey(key), decoded.signature));
  assert.equal(decoded.signature[0], 0x30, 'an ASN.1 SEQUENCE, as ecdsa.SignASN1');
});

test('a fresh record per body: each proof binds to the body it is made for', async () => {
  const proof = pkiTpmProof({ keyPem: privateKeyPem(key), hostname: 'metal-1', now: () => at });
  const [a, b] = await Promise.all([proof(Buffer.from('a')), proof(Buffer.from('b'))]);
  const hashOf = (h: string | undefined) =>
    decodePkiTpmToken((h ?? '').slice(10)).data.requestHash.toString('hex');
  assert.notEqual(hashOf(a), hashOf(b));
});

test('refuses keys kops cannot verify, and says which file is missing', async () => {
  const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey;
  assert.throws(
    () => pkiTpmProof({ keyPem: privateKeyPem(rsa), keySource: 'rsa.pem' }),
    /rsa\.pem is a rsa key; .*ECDSA keys only/,
  );
  assert.throws(() => pkiTpmProof({ keyPem: 'not a key' }), /not a PEM private key/);
  await assert.rejects(
    pkiTpmProofFromFile('/nonexistent/private.pem'),
    /cannot read the machine key \/nonexistent\/private\.pem/,
  );
});
