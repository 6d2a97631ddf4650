import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { HetznerServer } from '../../cloud/hetzner/servers.ts';
import { type HetznerSimulator, hetznerRateLimit, startHetznerSimulator } from './simulator.ts';

let sim: HetznerSimulator;
before(async () => {
  sim = await startHetznerSimulator();
});
after(() => sim.close());

/** The parts of Hetzner's answers these tests read. */
interface Answer {
  servers: HetznerServer[];
  server: HetznerServer;
  meta: { pagination: Record<string, number | null> };
  error: { code: string };
}

async function get(path: string, token = sim.token) {
  const res = await fetch(`${sim.endpoint}${path}`, { headers: { authorization: `Bearer ${token}` } });
  return { status: res.status, headers: res.headers, body: (await res.json()) as Answer };
}

test('servers are listed by label selector, 50 at most per page, with Hetzner’s pagination', async () => {
  sim.addGroup('a.example.com', 'nodes', 60);
  sim.addGroup('b.example.com', 'nodes', 5);
  const first = await get('/servers?label_selector=kops.k8s.io/cluster=a.example.com&per_page=50');
  assert.equal(first.status, 200);
  assert.equal(first.body.servers.length, 50);
  assert.deepEqual(first.body.meta.pagination, {
    page: 1,
    per_page: 50,
    previous_page: null,
    next_page: 2,
    last_page: 2,
    total_entries: 60,
  });
  const second = await get('/servers?label_selector=kops.k8s.io/cluster=a.example.com&per_page=50&page=2');
  assert.equal(second.body.servers.length, 10);
  assert.equal(second.body.meta.pagination.next_page, null);
  const notA = await get(
    '/servers?label_selector=kops.k8s.io/cluster!=a.example.com,kops.k8s.io/instance-group',
  );
  assert.equal(notA.body.meta.pagination.total_entries, 5);
  assert.equal((await get('/servers?per_page=51')).status, 400);
  assert.equal((await get('/servers?label_selector=a%20in%20(b')).body.error.code, 'invalid_input');
});

test('one server by id, Hetzner’s error envelope, and the token', async () => {
  const server = sim.addServer({ name: 'x', publicIp: '203.0.113.1' });
  const found = await get(`/servers/${server.id}`);
  assert.equal(found.body.server.name, 'x');
  assert.equal(found.body.server.public_net?.ipv4?.ip, '203.0.113.1');
  assert.equal(found.body.server.private_net?.[0]?.ip, server.privateIps[0]);
  // As the API since 2026-07-01 (hcloud-go hcloud/schema/server.go): `location`, no `datacenter`.
  assert.equal(found.body.server.location?.name, 'fsn1');
  assert.ok(!('datacenter' in found.body.server));
  const missing = await get('/servers/1');
  assert.equal(missing.status, 404);
  assert.equal(missing.body.error.code, 'not_found');
  const unauthorized = await get(`/servers/${server.id}`, 'wrong');
  assert.equal(unauthorized.status, 401);
  assert.equal(unauthorized.body.error.code, 'unauthorized');
});

test('the rate limit answers 429 rate_limit_exceeded with the RateLimit headers', async () => {
  sim.setRateLimit(hetznerRateLimit(2, 3_600_000));
  try {
    const ok = await get('/servers?per_page=1');
    assert.equal(ok.headers.get('ratelimit-limit'), '2');
    assert.equal(ok.headers.get('ratelimit-remaining'), '1');
    await get('/servers?per_page=1');
    const throttled = await get('/servers?per_page=1');
    assert.equal(throttled.status, 429);
    assert.equal(throttled.body.error.code, 'rate_limit_exceeded');
    assert.equal(throttled.headers.get('ratelimit-remaining'), '0');
    assert.ok(Number(throttled.headers.get('ratelimit-reset')) > Date.now() / 1000);
  } finally {
    sim.setRateLimit(hetznerRateLimit());
  }
});

test('each server’s metadata service names it', async () => {
  const server = sim.addServer({ name: 'meta', privateIps: ['10.9.0.2'] });
  const text = async (key: string) => (await fetch(`${sim.metadataUrl(server.id)}/${key}`)).text();
  assert.equal(await text('instance-id'), String(server.id));
  assert.equal(await text('hostname'), 'meta');
  assert.equal(await text('private-networks'), '- ip: 10.9.0.2\n');
});
