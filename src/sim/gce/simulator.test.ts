import assert from 'node:assert/strict';
import { createPublicKey, verify } from 'node:crypto';
import { after, before, test } from 'node:test';
import { type GceSimulator, startGceSimulator } from './simulator.ts';

let sim: GceSimulator;
before(async () => {
  sim = await startGceSimulator({ project: 'sim-p', defaultPageSize: 2 });
  sim.seedInstanceGroup({
    zone: 'us-east1-b',
    instanceGroup: 'nodes',
    count: 5,
    clusterName: 'c.example.com',
  });
});
after(() => sim.close());

const authed = (url: string, init: RequestInit = {}) =>
  fetch(url, { ...init, headers: { authorization: `Bearer ${sim.accessToken}`, ...init.headers } });

test('compute calls without a valid bearer token get Google 401 JSON', async () => {
  for (const headers of [{}, { authorization: 'Bearer forged' }]) {
    const res = await fetch(`${sim.endpoint}/projects/sim-p/zones/us-east1-b/instances`, { headers });
    assert.equal(res.status, 401);
    const body = (await res.json()) as {
      error: { code: number; status: string; errors: Array<{ reason: string }> };
    };
    assert.equal(body.error.code, 401);
    assert.equal(body.error.status, 'UNAUTHENTICATED');
    assert.equal(body.error.errors[0]?.reason, 'required');
  }
});

test('a missing resource is a 404 with reason notFound', async () => {
  const res = await authed(`${sim.endpoint}/projects/sim-p/zones/us-east1-b/instances/nope`);
  assert.equal(res.status, 404);
  const body = (await res.json()) as { error: { message: string; errors: Array<{ reason: string }> } };
  assert.equal(body.error.errors[0]?.reason, 'notFound');
  assert.match(body.error.message, /projects\/sim-p\/zones\/us-east1-b\/instances\/nope' was not found/);
});

test('lists paginate with pageToken and honour filters', async () => {
  const names: string[] = [];
  let token: string | undefined;
  let pages = 0;
  do {
    const url = `${sim.endpoint}/projects/sim-p/zones/us-east1-b/instances${token ? `?pageToken=${token}` : ''}`;
    const page = (await (await authed(url)).json()) as {
      items: Array<{ name: string }>;
      nextPageToken?: string;
    };
    names.push(...page.items.map((i) => i.name));
    token = page.nextPageToken;
    pages++;
  } while (token);
  assert.equal(pages, 3);
  assert.equal(new Set(names).size, 5);

  const filtered = await authed(
    `${sim.endpoint}/projects/sim-p/aggregated/instances?filter=${encodeURIComponent(`name = "${names[0]}"`)}`,
  );
  const body = (await filtered.json()) as { items: Record<string, { instances: unknown[] }> };
  assert.deepEqual(Object.keys(body.items), ['zones/us-east1-b']);
  assert.equal(body.items['zones/us-east1-b']?.instances.length, 1);

  const bad = await authed(`${sim.endpoint}/projects/sim-p/zones/us-east1-b/instances?filter=name%20%3D`);
  assert.equal(bad.status, 400);
});

test('the token endpoint exchanges only the simulator refresh token', async () => {
  const post = (refresh: string) =>
    fetch(sim.tokenUri, {
      method: 'POST',
      body: new URLSearchParams({ grant_type: 'refresh_token', refresh_token: refresh }),
    });
  const bad = await post('1//stolen');
  assert.equal(bad.status, 400);
  assert.equal(((await bad.json()) as { error: string }).error, 'invalid_grant');
  const good = (await (await post(sim.refreshToken)).json()) as { access_token: string; expires_in: number };
  assert.ok(good.expires_in > 0);
  const res = await fetch(`${sim.endpoint}/projects/sim-p/global/instanceTemplates/nodes-us-east1-b-tpl`, {
    headers: { authorization: `Bearer ${good.access_token}` },
  });
  assert.equal(res.status, 200);
});

test('the metadata identity path signs tokens that verify against the JWKS', async () => {
  const name = sim.world.instances('sim-p', 'us-east1-b')[0]?.name ?? '';
  const url = `${sim.metadataUri}/instance/service-accounts/default/identity?audience=https://ca.example&format=full&instance=us-east1-b/${name}`;
  assert.equal((await fetch(url)).status, 403, 'Metadata-Flavor: Google is required');
  const token = await (await fetch(url, { headers: { 'metadata-flavor': 'Google' } })).text();
  const [h, p, s] = token.split('.') as [string, string, string];
  const header = JSON.parse(Buffer.from(h, 'base64url').toString()) as { alg: string; kid: string };
  const payload = JSON.parse(Buffer.from(p, 'base64url').toString());
  assert.equal(header.alg, 'RS256');
  assert.equal(payload.aud, 'https://ca.example');
  assert.equal(payload.google.compute_engine.instance_name, name);
  assert.equal(payload.google.compute_engine.project_id, 'sim-p');
  const jwks = (await (await fetch(sim.jwksUri)).json()) as { keys: Array<{ kid: string }> };
  const jwk = jwks.keys.find((k) => k.kid === header.kid);
  assert.ok(jwk);
  const key = createPublicKey({ key: jwk as never, format: 'jwk' });
  assert.ok(verify('sha256', Buffer.from(`${h}.${p}`), key, Buffer.from(s, 'base64url')));
});

test('getShieldedInstanceIdentity returns the instance vTPM public keys', async () => {
  const name = sim.world.instances('sim-p', 'us-east1-b')[0]?.name ?? '';
  const res = await authed(
    `${sim.endpoint}/projects/sim-p/zones/us-east1-b/instances/${name}/getShieldedInstanceIdentity`,
  );
  const body = (await res.json()) as { kind: string; signingKey: { ekPub: string } };
  assert.equal(body.kind, 'compute#shieldedInstanceIdentity');
  const expected = createPublicKey(sim.world.shieldedKeys('sim-p', 'us-east1-b', name).signing).export({
    format: 'pem',
    type: 'spki',
  });
  assert.equal(body.signingKey.ekPub, expected);
});

test('calls are recorded by API method and injected faults answer in Google error JSON', async () => {
  sim.clearCalls();
  sim.failNext(1, 429);
  const res = await authed(`${sim.endpoint}/projects/sim-p/zones/us-east1-b/instanceGroupManagers`);
  assert.equal(res.status, 429);
  assert.equal(((await res.json()) as { error: { status: string } }).error.status, 'RESOURCE_EXHAUSTED');
  const ok = await authed(`${sim.endpoint}/projects/sim-p/zones/us-east1-b/instanceGroupManagers`);
  assert.equal(((await ok.json()) as { items: unknown[] }).items.length, 1);
  assert.equal(sim.count('instanceGroupManagers.list'), 2);
});

test('delayNext holds the next requests of an operation before serving them', async () => {
  sim.delayNext(1, 50, 'jwks');
  const keys = (await (await fetch(sim.jwksUri)).json()) as { keys: unknown[] };
  assert.ok(keys.keys.length >= 1, 'served after the delay');
  sim.delayNext(1, 500, 'jwks');
  const held = await fetch(sim.jwksUri, { signal: AbortSignal.timeout(50) }).catch((err: Error) => err);
  assert.ok(held instanceof Error, 'still held when the client gives up');
  sim.delayNext(0, 0);
});

test('a fault aimed at one operation fails only it, whatever its kind (the identity-token keys)', async () => {
  sim.failNext(1, 503, 'jwks');
  const failed = await fetch(sim.jwksUri);
  assert.equal(failed.status, 503);
  const instances = await authed(`${sim.endpoint}/projects/sim-p/zones/us-east1-b/instanceGroupManagers`);
  assert.equal(instances.status, 200, 'other operations are untouched');
  const keys = (await (await fetch(sim.jwksUri)).json()) as { keys: unknown[] };
  assert.ok(keys.keys.length >= 1, 'one failure only');
});

test('a rate-quota fault answers as Compute Engine does: 403 PERMISSION_DENIED, reason rateLimitExceeded in usageLimits', async () => {
  type GoogleError = {
    error: {
      code: number;
      message: string;
      status: string;
      errors: Array<{ message: string; domain: string; reason: string }>;
    };
  };
  const url = `${sim.endpoint}/projects/sim-p/zones/us-east1-b/instanceGroupManagers`;
  sim.failNext(1, 403, 'instanceGroupManagers.list', { reason: 'rateLimitExceeded' });
  const quota = await authed(url);
  assert.equal(quota.status, 403);
  const { error } = (await quota.json()) as GoogleError;
  assert.equal(error.code, 403);
  assert.equal(error.status, 'PERMISSION_DENIED');
  assert.match(error.message, /^Quota exceeded for quota metric .* of service 'compute\.googleapis\.com'/);
  assert.deepEqual(error.errors, [
    { message: error.message, domain: 'usageLimits', reason: 'rateLimitExceeded' },
  ]);

  sim.failNext(1, 403, undefined, { reason: 'userRateLimitExceeded' });
  const user = ((await (await authed(url)).json()) as GoogleError).error.errors[0];
  assert.deepEqual(user, {
    message: 'User Rate Limit Exceeded',
    domain: 'usageLimits',
    reason: 'userRateLimitExceeded',
  });

  sim.failNext(1, 403);
  const denied = ((await (await authed(url)).json()) as GoogleError).error;
  assert.equal(denied.status, 'PERMISSION_DENIED');
  assert.deepEqual(
    denied.errors.map((e) => [e.domain, e.reason]),
    [['global', 'forbidden']],
    'a plain 403 is a missing permission',
  );
  assert.equal((await authed(url)).status, 200, 'the faults are spent');
});
