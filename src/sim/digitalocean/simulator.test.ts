import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Droplet } from '../../cloud/digitalocean/droplets.ts';
import {
  type DigitalOceanSimulator,
  digitalOceanRateLimit,
  startDigitalOceanSimulator,
} from './simulator.ts';

let sim: DigitalOceanSimulator;
before(async () => {
  sim = await startDigitalOceanSimulator();
});
after(() => sim.close());

interface Answer {
  droplets: Droplet[];
  droplet: Droplet;
  links: { pages: Record<string, string> };
  meta: { total: number };
  id: string;
  message: string;
}

async function get(pathOrUrl: string, token = sim.token) {
  const url = pathOrUrl.startsWith('http') ? pathOrUrl : `${sim.endpoint}${pathOrUrl}`;
  const res = await fetch(url, { headers: { authorization: `Bearer ${token}` } });
  return { status: res.status, headers: res.headers, body: (await res.json()) as Answer };
}

test('droplets are listed by tag with links.pages and meta.total, 200 at most per page', async () => {
  sim.addGroup('a.example.com', 'nodes', 250);
  sim.addGroup('b.example.com', 'nodes', 3);
  const first = await get('/droplets?tag_name=KubernetesCluster:a-example-com&per_page=200');
  assert.equal(first.body.droplets.length, 200);
  assert.equal(first.body.meta.total, 250);
  assert.ok(first.body.links.pages['next']);
  const second = await get(first.body.links.pages['next'] as string);
  assert.equal(second.body.droplets.length, 50);
  assert.equal(second.body.links.pages['next'], undefined);
  assert.equal((await get('/droplets?per_page=201')).body.id, 'bad_request');
});

test('one droplet, the error envelope, the token', async () => {
  const droplet = sim.addDroplet({ name: 'd' });
  assert.equal((await get(`/droplets/${droplet.id}`)).body.droplet.name, 'd');
  const missing = await get('/droplets/1');
  assert.equal(missing.status, 404);
  assert.equal(missing.body.id, 'not_found');
  assert.equal((await get(`/droplets/${droplet.id}`, 'nope')).body.id, 'unauthorized');
});

test('the rate limit answers 429 too_many_requests with the ratelimit headers', async () => {
  sim.setRateLimit(digitalOceanRateLimit(1, 60_000));
  try {
    assert.equal((await get('/droplets?per_page=1')).headers.get('ratelimit-remaining'), '0');
    const throttled = await get('/droplets?per_page=1');
    assert.equal(throttled.status, 429);
    assert.equal(throttled.body.id, 'too_many_requests');
    assert.ok(Number(throttled.headers.get('ratelimit-reset')) > Date.now() / 1000);
  } finally {
    sim.setRateLimit(digitalOceanRateLimit());
  }
});

test('each droplet’s metadata service names it', async () => {
  const droplet = sim.addDroplet({ name: 'meta', region: 'ams3' });
  const text = async (key: string) => (await fetch(`${sim.metadataUrl(droplet.id)}/${key}`)).text();
  assert.equal(await text('id'), String(droplet.id));
  assert.equal(await text('hostname'), 'meta');
  assert.equal(await text('region'), 'ams3');
});
