import assert from 'node:assert/strict';
import { test } from 'node:test';
import { googleIssuer, IdentityIssuer, type IdentitySubject } from './identity-issuer.ts';

const subject: IdentitySubject = {
  projectId: 'p1',
  projectNumber: '1234',
  zone: 'us-central1-a',
  instanceId: '99',
  instanceName: 'n1',
  instanceCreationTimestamp: 1_700_000_000,
  serviceAccountId: '555',
  serviceAccountEmail: '1234-compute@developer.gserviceaccount.com',
};

const decode = (token: string, index: number) =>
  JSON.parse(Buffer.from(token.split('.')[index] as string, 'base64url').toString());

test('full tokens carry the compute_engine claims, standard ones do not', () => {
  const issuer = new IdentityIssuer();
  const full = decode(issuer.issue(subject, { audience: 'aud', format: 'full', issuedAt: 1_000 }), 1);
  assert.equal(full.iss, googleIssuer);
  assert.equal(full.aud, 'aud');
  assert.equal(full.exp - full.iat, 3600);
  assert.deepEqual(full.google.compute_engine, {
    instance_creation_timestamp: 1_700_000_000,
    instance_id: '99',
    instance_name: 'n1',
    project_id: 'p1',
    project_number: 1234,
    zone: 'us-central1-a',
  });
  assert.equal(decode(issuer.issue(subject, { audience: 'aud' }), 1).google, undefined);
});

test('rotation signs with the new key and keeps publishing the old one', () => {
  const issuer = new IdentityIssuer();
  const firstKid = decode(issuer.issue(subject, { audience: 'a' }), 0).kid;
  const newKid = issuer.rotate();
  assert.notEqual(newKid, firstKid);
  assert.equal(decode(issuer.issue(subject, { audience: 'a' }), 0).kid, newKid);
  assert.deepEqual(
    issuer.jwks().keys.map((k) => k.kid),
    [newKid, firstKid],
  );
  assert.ok(issuer.jwks().keys.every((k) => k.kty === 'RSA' && k.alg === 'RS256' && k.use === 'sig'));
});
