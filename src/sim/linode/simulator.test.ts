import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { type LinodeSimulator, startLinodeSimulator } from './simulator.ts';

let sim: LinodeSimulator;
before(async () => {
  sim = await startLinodeSimulator();
});
after(() => sim.close());

async function get(path: string, headers: Record<string, string> = {}) {
  const res = await fetch(`${sim.origin}${path}`, {
    headers: { authorization: `Bearer ${sim.token}`, ...headers },
  });
  return { status: res.status, headers: res.headers, body: (await res.json()) as Record<string, unknown> };
}

test('instances are listed with X-Filter on a tag and page/page_size (25 to 500)', async () => {
  sim.addGroup('a.example.com', 'nodes', 30);
  sim.addGroup('b.example.com', 'nodes', 2);
  const filter = { 'x-filter': JSON.stringify({ tags: 'kops.k8s.io/cluster:a.example.com' }) };
  const first = await get('/v4beta/linode/instances?page_size=25', filter);
  assert.deepEqual([first.body['page'], first.body['pages'], first.body['results']], [1, 2, 30]);
  assert.equal((first.body['data'] as unknown[]).length, 25);
  const contains = { 'x-filter': JSON.stringify({ tags: { '+contains': 'b.example' } }) };
  assert.equal((await get('/v4/linode/instances', contains)).body['results'], 2);
  const tooSmall = await get('/v4beta/linode/instances?page_size=10');
  assert.equal(tooSmall.status, 400);
  assert.deepEqual(tooSmall.body['errors'], [
    { reason: 'Must be a value between 25 and 500.', field: 'page_size' },
  ]);
  assert.equal((await get('/v4beta/linode/instances', { 'x-filter': '{' })).status, 400);
});

test('a filter that matches nothing answers page 0 of 0 pages, as the real API does', async () => {
  // linode/linode_api4-python pull #192: "If a filter is given to a collection that resulted in no
  // matches, the resulting API response would include "pages": 0, "page": 0, and "results": 0".
  const none = { 'x-filter': JSON.stringify({ tags: 'kops.k8s.io/cluster:none.example.com' }) };
  const empty = await get('/v4beta/linode/instances?page=1&page_size=500', none);
  assert.equal(empty.status, 200);
  assert.deepEqual(empty.body, { data: [], page: 0, pages: 0, results: 0 });
});

test('collections have their own limit of 200 a minute, answered 429 with Retry-After', async () => {
  const limitHeaders = (await get('/v4beta/linode/instances')).headers;
  assert.equal(limitHeaders.get('x-ratelimit-limit'), '200');
  const single = await get('/v4/linode/instances/1');
  assert.equal(single.status, 404);
  assert.deepEqual(single.body['errors'], [{ reason: 'Not found' }]);
  assert.equal(single.headers.get('x-ratelimit-limit'), '1600');
  // The bucket refills 200 a minute (one every 0.3 s) while the loop runs: on a busy machine a few
  // more than those remaining get through before the first 429, never many more.
  const remaining = Number(limitHeaders.get('x-ratelimit-remaining'));
  assert.ok(remaining > 150 && remaining < 200, `${remaining} remaining`);
  let allowed = 0;
  let throttled = await get('/v4beta/linode/instances?page_size=25');
  while (throttled.status === 200 && allowed < remaining + 60) {
    allowed++;
    throttled = await get('/v4beta/linode/instances?page_size=25');
  }
  assert.equal(throttled.status, 429);
  assert.ok(allowed >= remaining, `${allowed} allowed before the 429, with ${remaining} remaining`);
  assert.ok(Number(throttled.headers.get('retry-after')) >= 1);
  // Other operations still have room.
  assert.equal((await get('/v4/linode/instances/1')).status, 404);
});

test('the metadata service wants a token from PUT /v1/token, good on its own instance only', async () => {
  const a = sim.addInstance({ label: 'a' });
  const b = sim.addInstance({ label: 'b' });
  const token = await (
    await fetch(`${sim.metadataUrl(a.id)}/v1/token`, {
      method: 'PUT',
      headers: { 'Metadata-Token-Expiry-Seconds': '300' },
    })
  ).text();
  const read = (id: number, headers: Record<string, string>) =>
    fetch(`${sim.metadataUrl(id)}/v1/instance`, { headers }).then(
      async (r) => [r.status, await r.text()] as const,
    );
  const [status, text] = await read(a.id, { 'Metadata-Token': token });
  assert.equal(status, 200);
  assert.match(text, new RegExp(`^id: ${a.id}$`, 'm'));
  assert.equal((await read(a.id, {}))[0], 401);
  assert.equal((await read(b.id, { 'Metadata-Token': token }))[0], 401);
});
