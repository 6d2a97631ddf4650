import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import { Registry } from 'prom-client';
import { UnauthenticatedError, UnavailableError } from '../../errors.ts';
import { generateSigningKey, signRs256Jwt } from '../../sim/gce/identity-issuer.ts';
import { type GceSimulator, startGceSimulator } from '../../sim/gce/simulator.ts';
import { cloudCallsTimed, cloudRequests } from '../../testing/cloud-calls.ts';
import { cloudCallMetrics } from '../metrics.ts';
import { GceIdentityTokenVerifier, JwksKeyStore } from './identity-token.ts';

const audience = 'https://kops-controller.internal:3988/bootstrap';
const zone = 'us-central1-a';
let sim: GceSimulator;
let nodeName: string;

/** A JWKS server of our own, publishing a key the test holds, for claims Google would never sign. */
const own = generateSigningKey();
let ownJwksUrl: string;
const ownServer = createServer((_req, res) => {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ keys: [own.jwk] }));
});

before(async () => {
  sim = await startGceSimulator({ project: 'kops-prod' });
  const [node] = sim.world.seedInstanceGroup({ zone, instanceGroup: 'nodes', count: 1, clusterName: 'c' });
  nodeName = node?.name ?? '';
  await new Promise<void>((resolve) => ownServer.listen(0, '127.0.0.1', resolve));
  ownJwksUrl = `http://127.0.0.1:${(ownServer.address() as AddressInfo).port}/certs`;
});
after(async () => {
  await sim.close();
  ownServer.close();
});

const verifier = (options: Partial<ConstructorParameters<typeof GceIdentityTokenVerifier>[0]> = {}) =>
  new GceIdentityTokenVerifier({ keys: new JwksKeyStore({ url: sim.jwksUri }), audience, ...options });

const now = () => Math.floor(Date.now() / 1000);

/** Claims shaped like a real format=full token, for our own key. */
function ownClaims(change: Record<string, unknown> = {}) {
  const iat = now();
  return {
    iss: 'https://accounts.google.com',
    aud: audience,
    sub: '1234',
    iat,
    exp: iat + 3600,
    google: {
      compute_engine: {
        project_id: 'kops-prod',
        project_number: 123,
        zone,
        instance_id: '99',
        instance_name: 'n1',
        instance_creation_timestamp: iat - 60,
      },
    },
    ...change,
  };
}

const ownVerifier = (options: Partial<ConstructorParameters<typeof GceIdentityTokenVerifier>[0]> = {}) =>
  new GceIdentityTokenVerifier({ keys: new JwksKeyStore({ url: ownJwksUrl }), audience, ...options });

test('a metadata-server token verifies and yields the instance claims', async () => {
  const token = sim.identityToken(zone, nodeName, { audience, format: 'full' });
  const claims = await verifier({ projectIds: ['kops-prod'] }).verify(token);
  const instance = sim.world.instance('kops-prod', zone, nodeName);
  assert.equal(claims.projectId, 'kops-prod');
  assert.equal(claims.projectNumber, sim.world.projectNumber('kops-prod'));
  assert.equal(claims.zone, zone);
  assert.equal(claims.instanceName, nodeName);
  assert.equal(claims.instanceId, instance.id);
  assert.equal(claims.audience, audience);
  assert.match(claims.serviceAccountEmail ?? '', /-compute@developer\.gserviceaccount\.com$/);
});

test('forged: a token signed with another key under a published kid fails the signature', async () => {
  const realKid = sim.issuer.jwks().keys[0]?.kid as string;
  const forged = signRs256Jwt({ kid: realKid }, ownClaims(), own.privateKey);
  await assert.rejects(verifier().verify(forged), {
    name: 'UnauthenticatedError',
    message: /signature is invalid/,
  });
});

test('forged: a token signed with an unpublished key is refused', async () => {
  const forged = signRs256Jwt({ kid: own.kid }, ownClaims(), own.privateKey);
  await assert.rejects(verifier().verify(forged), /signed with key .* which .* does not publish/);
});

test('forged: a payload altered after signing fails the signature', async () => {
  const token = sim.identityToken(zone, nodeName, { audience: 'https://other.example', format: 'full' });
  const [h, p, s] = token.split('.') as [string, string, string];
  const payload = JSON.parse(Buffer.from(p, 'base64url').toString());
  payload.aud = audience;
  const altered = `${h}.${Buffer.from(JSON.stringify(payload)).toString('base64url')}.${s}`;
  await assert.rejects(verifier().verify(altered), /signature is invalid/);
});

test('forged: a token for another audience is refused', async () => {
  const token = sim.identityToken(zone, nodeName, { audience: 'https://other.example', format: 'full' });
  await assert.rejects(
    verifier().verify(token),
    /audience "https:\/\/other\.example" is not this controller/,
  );
});

test('forged: an expired token is refused; skew is tolerated on both ends', async () => {
  const old = sim.identityToken(zone, nodeName, { audience, format: 'full', issuedAt: now() - 3_700 });
  await assert.rejects(verifier().verify(old), /has expired/);
  const justExpired = sim.identityToken(zone, nodeName, {
    audience,
    format: 'full',
    issuedAt: now() - 3_630,
  });
  assert.equal((await verifier().verify(justExpired)).instanceName, nodeName);
  const future = sim.identityToken(zone, nodeName, { audience, format: 'full', issuedAt: now() + 600 });
  await assert.rejects(
    verifier().verify(future),
    /issued \d+ s in the future by this controller's clock; at most 60 s is tolerated.*check this controller's clock/,
  );
  const slightlyAhead = sim.identityToken(zone, nodeName, { audience, format: 'full', issuedAt: now() + 30 });
  assert.ok(await verifier().verify(slightlyAhead));
});

test('tokens without compute claims, of another issuer, too long-lived or of another project are refused', async () => {
  const standard = sim.identityToken(zone, nodeName, { audience });
  await assert.rejects(verifier().verify(standard), /lacks claim google.*format=full/);
  const cases: Array<[Record<string, unknown>, RegExp]> = [
    [{ iss: 'https://evil.example' }, /issuer https:\/\/evil\.example is not Google/],
    [{ exp: now() + 86_400 }, /lifetime exceeds 3600 s/],
  ];
  for (const [change, message] of cases) {
    await assert.rejects(
      ownVerifier().verify(signRs256Jwt({ kid: own.kid }, ownClaims(change), own.privateKey)),
      message,
    );
  }
  const token = signRs256Jwt({ kid: own.kid }, ownClaims(), own.privateKey);
  await assert.rejects(ownVerifier({ projectIds: ['other'] }).verify(token), /project kops-prod, not one of/);
  assert.equal((await ownVerifier({ projectIds: ['kops-prod'] }).verify(token)).instanceId, '99');
});

test('alg none, HMAC and malformed tokens are refused', async () => {
  const segment = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');
  const none = `${segment({ alg: 'none', kid: own.kid })}.${segment(ownClaims())}.`;
  await assert.rejects(ownVerifier().verify(none), /algorithm "none" is not accepted/);
  const input = `${segment({ alg: 'HS256', kid: own.kid })}.${segment(ownClaims())}`;
  const hmac = `${input}.${createHmac('sha256', JSON.stringify(own.jwk)).update(input).digest('base64url')}`;
  await assert.rejects(ownVerifier().verify(hmac), /algorithm "HS256" is not accepted/);
  for (const bad of ['', 'a.b', 'not.a.jwt', `${segment({ alg: 'RS256' })}.e30.sig`, 'x'.repeat(10_000)]) {
    await assert.rejects(ownVerifier().verify(bad), UnauthenticatedError, bad.slice(0, 20));
  }
});

test("attack: a token's unverified header, and the audience any VM may ask for, are quoted and cut in the refusal", async () => {
  const segment = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');
  const long = 'k'.repeat(5_000);
  const cases: [string, RegExp][] = [
    [
      `${segment({ alg: long, kid: own.kid })}.${segment(ownClaims())}.`,
      /algorithm "k+"… \(5000 characters\) is not accepted/,
    ],
    [
      signRs256Jwt({ kid: long }, ownClaims(), own.privateKey),
      /signed with key "k+"… \(5000 characters\), which .* does not publish/,
    ],
    // Signed: but the metadata server mints a token for whatever audience the VM asks.
    [
      signRs256Jwt({ kid: own.kid }, ownClaims({ aud: long }), own.privateKey),
      /audience "k+"… \(5000 characters\) is not this controller/,
    ],
  ];
  for (const [token, message] of cases) {
    await assert.rejects(ownVerifier().verify(token), (err: Error) => {
      assert.match(err.message, message);
      assert.ok(err.message.length < 300, `${err.message.length} characters: ${err.message.slice(0, 200)}`);
      return true;
    });
  }
});

test('keys are cached, refreshed on an unknown kid after rotation, and refreshes are rate-limited', async () => {
  let clock = 1_000_000;
  const keys = new JwksKeyStore({ url: sim.jwksUri, minRefreshIntervalMs: 30_000, now: () => clock });
  const v = new GceIdentityTokenVerifier({ keys, audience });
  sim.clearCalls();
  await v.verify(sim.identityToken(zone, nodeName, { audience, format: 'full' }));
  await v.verify(sim.identityToken(zone, nodeName, { audience, format: 'full' }));
  assert.equal(sim.count('jwks'), 1);

  clock += 30_000;
  sim.issuer.rotate();
  const rotated = sim.identityToken(zone, nodeName, { audience, format: 'full' });
  assert.ok(await v.verify(rotated));
  assert.equal(sim.count('jwks'), 2);

  // Unknown kids within the interval do not trigger more fetches.
  const forged = signRs256Jwt({ kid: 'random-kid' }, ownClaims(), own.privateKey);
  await assert.rejects(v.verify(forged), /does not publish/);
  await assert.rejects(v.verify(forged), /does not publish/);
  assert.equal(sim.count('jwks'), 2);
});

test("a clock stepped back after running ahead: Google's rotated key is fetched, not taken for a key Google does not publish", async () => {
  let clock = 3_600_000; // an hour ahead at the first fetch
  const keys = new JwksKeyStore({ url: sim.jwksUri, now: () => clock });
  const v = new GceIdentityTokenVerifier({ keys, audience });
  await v.verify(sim.identityToken(zone, nodeName, { audience, format: 'full' }));
  sim.issuer.rotate();
  clock = 300_000; // corrected; five minutes later, well past the refresh interval
  assert.ok(await v.verify(sim.identityToken(zone, nodeName, { audience, format: 'full' })));
});

test('an unreachable JWKS is an outage, not a denial', async () => {
  const keys = new JwksKeyStore({ url: 'http://127.0.0.1:1/certs', timeoutMs: 2_000 });
  const token = sim.identityToken(zone, nodeName, { audience, format: 'full' });
  await assert.rejects(new GceIdentityTokenVerifier({ keys, audience }).verify(token), UnavailableError);
  await assert.rejects(new GceIdentityTokenVerifier({ keys, audience }).verify(token), UnavailableError);
});

test('each fetch of the keys is counted as call jwks: ok, rejected, throttled, or an error', async () => {
  const registry = new Registry();
  const cloudCalls = cloudCallMetrics(registry);
  let answer = { status: 429, body: '{}' };
  const flaky = createServer((_req, res) => {
    res.writeHead(answer.status, { 'content-type': 'application/json' });
    res.end(answer.body);
  });
  await new Promise<void>((resolve) => flaky.listen(0, '127.0.0.1', resolve));
  const flakyUrl = `http://127.0.0.1:${(flaky.address() as AddressInfo).port}/certs`;
  const token = sim.identityToken(zone, nodeName, { audience, format: 'full' });
  /** One verification with a key store of its own, so each fetches once. */
  const verifyWith = (url: string) =>
    new GceIdentityTokenVerifier({ keys: new JwksKeyStore({ url, cloudCalls }), audience }).verify(token);
  try {
    assert.ok(await verifyWith(sim.jwksUri));
    await assert.rejects(verifyWith(`${sim.jwksUri}/missing`), UnavailableError);
    await assert.rejects(verifyWith(flakyUrl), UnavailableError);
    answer = { status: 200, body: '{"not":"a jwks"}' };
    await assert.rejects(verifyWith(flakyUrl), UnavailableError);
    await assert.rejects(verifyWith('http://127.0.0.1:1/certs'), UnavailableError);
  } finally {
    flaky.closeAllConnections();
    flaky.close();
  }
  assert.deepEqual(await cloudRequests(registry), {
    'gce jwks ok': 1,
    'gce jwks rejected': 1,
    'gce jwks throttled': 1,
    'gce jwks error': 2,
  });
  assert.equal(await cloudCallsTimed(registry, 'gce', 'jwks'), 5);
});
