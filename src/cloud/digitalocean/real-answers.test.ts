/**
 * The DigitalOcean API's answers in their real shape, over real HTTP (a scripted loopback API), read
 * through the provider as production reads them. The shapes follow digitalocean/openapi at 7c1300c
 * (2026-08): specification/resources/droplets/models/droplet.yml, network_v4.yml, network_v6.yml,
 * responses/all_droplets.yml and existing_droplet.yml, shared/pages.yml (`links.pages` with
 * first/prev/next/last, absent on a single page: `links: {}`), shared/meta.yml (`meta.total`),
 * shared/models/error.yml (`id`, `message`, `request_id`), shared/responses/too_many_requests.yml and
 * shared/headers.yml (`ratelimit-reset`: Unix seconds); digitalocean/godo links.go (the page of a
 * link is its `page` query parameter). The values are ours.
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { KopsError } from '../../errors.ts';
import type { ScriptedAnswer, ScriptedRequest } from '../scripted-api.test-support.ts';
import { scriptedProviders } from '../scripted-providers.test-support.ts';
import { doThrottleWait } from './droplets.ts';

const cluster = 'prod.example.com';
const closers: Array<() => unknown> = [];
after(async () => {
  for (const close of closers.reverse()) await close();
});
const scripted = scriptedProviders(cluster, closers);
/** The provider against a scripted API answering as `script` says. */
const digitalOcean = async (script: (r: ScriptedRequest) => ScriptedAnswer) =>
  (await scripted.digitalOcean(script)).provider;

/** A droplet with the fields and nesting of the OpenAPI droplet model (not all of them). */
function realDroplet(id: number, overrides: Record<string, unknown> = {}) {
  return {
    id,
    name: `nodes-nyc3-${id}`,
    memory: 2048,
    vcpus: 2,
    disk: 60,
    locked: false,
    status: 'active',
    created_at: '2026-08-01T10:00:00Z',
    features: ['private_networking'],
    backup_ids: [],
    next_backup_window: null,
    snapshot_ids: [],
    size_slug: 's-2vcpu-2gb',
    networks: {
      v4: [
        { ip_address: `10.108.0.${id % 250}`, netmask: '255.255.240.0', gateway: '', type: 'private' },
        {
          ip_address: `198.51.100.${id % 250}`,
          netmask: '255.255.240.0',
          gateway: '198.51.100.1',
          type: 'public',
        },
      ],
      // v6 netmask is an integer in the model.
      v6: [{ ip_address: '2001:db8::10', netmask: 64, gateway: '2001:db8::1', type: 'public' }],
    },
    region: { name: 'New York 3', slug: 'nyc3', features: ['metadata'], available: true, sizes: [] },
    tags: ['KubernetesCluster:prod-example-com', 'kops-instancegroup:nodes-nyc3', 'kops-instance-role:Node'],
    vpc_uuid: '760e09ef-dc84-11e8-981e-3cfdfeaae000',
    ...overrides,
  };
}

test('GET /droplets/{id}: tags, private and public v4 and v6 addresses and the region slug are read', async () => {
  const provider = await digitalOcean((r) =>
    r.path === '/droplets/3164444'
      ? { body: { droplet: realDroplet(3164444) } }
      : { status: 404, body: { id: 'not_found', message: 'The resource you requested could not be found.' } },
  );
  const id = 'digitalocean://3164444';
  const result = (await provider.nodeIdentifier.identify([id])).get(id);
  assert.ok(result?.ok, JSON.stringify(result));
  assert.equal(result.identity.instanceGroup, 'nodes-nyc3');
  assert.equal(result.identity.zone, 'nyc3');
  assert.deepEqual(result.identity.addresses, [
    { type: 'InternalIP', address: '10.108.0.194' },
    { type: 'ExternalIP', address: '198.51.100.194' },
    { type: 'ExternalIP', address: '2001:db8::10' },
    { type: 'Hostname', address: 'nodes-nyc3-3164444' },
  ]);
  // The incarnation: the droplet's id and its `created_at`.
  assert.deepEqual(result.identity.incarnation, {
    id: '3164444',
    createdAt: new Date('2026-08-01T10:00:00Z'),
  });
});

test('GET /droplets?tag_name=…: pages linked by links.pages.next, the last one without it, a single one with links: {}', async () => {
  const queries: string[] = [];
  const base = 'https://api.digitalocean.com/v2/droplets?page=';
  const provider = await digitalOcean((r) => {
    queries.push(`${r.path}?${r.query.toString()}`);
    const page = Number(r.query.get('page'));
    if (page === 1) {
      const droplets = Array.from({ length: 200 }, (_, i) => realDroplet(1001 + i));
      return {
        body: {
          droplets,
          links: { pages: { last: `${base}2&per_page=200`, next: `${base}2&per_page=200` } },
          meta: { total: 201 },
        },
      };
    }
    return {
      body: {
        droplets: [realDroplet(1201)],
        links: { pages: { first: `${base}1&per_page=200`, prev: `${base}1&per_page=200` } },
        meta: { total: 201 },
      },
    };
  });
  const droplets = await provider.droplets.listCluster();
  assert.equal(droplets.length, 201);
  assert.deepEqual(queries, [
    '/droplets?tag_name=KubernetesCluster%3Aprod-example-com&page=1&per_page=200',
    '/droplets?tag_name=KubernetesCluster%3Aprod-example-com&page=2&per_page=200',
  ]);

  const single = await digitalOcean(() => ({
    body: { droplets: [realDroplet(7)], links: {}, meta: { total: 1 } },
  }));
  assert.equal((await single.droplets.listCluster()).length, 1);
});

test('the error envelope { id, message, request_id } and 429 too_many_requests with ratelimit-reset in Unix seconds', async () => {
  const reset = Math.ceil(Date.now() / 1000) + 30;
  const headers = { 'ratelimit-limit': '5000', 'ratelimit-remaining': '0', 'ratelimit-reset': String(reset) };
  const provider = await digitalOcean((r) =>
    r.path === '/droplets/5'
      ? {
          status: 404,
          body: {
            id: 'not_found',
            message: 'The resource you requested could not be found.',
            request_id: '4d9d8375-3c56-4925-a3e7-eb137fed17e9',
          },
        }
      : { status: 429, body: { id: 'too_many_requests', message: 'API rate limit exceeded.' }, headers },
  );
  await assert.rejects(provider.droplets.get('5'), (err: unknown) => {
    assert.ok(err instanceof KopsError);
    assert.equal(err.kind, 'not-found');
    assert.match(err.message, /not_found: The resource you requested could not be found\./);
    return true;
  });
  await assert.rejects(provider.droplets.get('6'), (err: unknown) => {
    assert.ok(err instanceof KopsError);
    assert.equal(err.kind, 'rate-limited');
    assert.match(err.message, /too_many_requests: API rate limit exceeded\./);
    return true;
  });
  const wait = doThrottleWait(headers);
  assert.ok(wait !== undefined && wait >= 29 && wait <= 31, String(wait));
});
