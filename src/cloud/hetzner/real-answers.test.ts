/**
 * The Hetzner Cloud API's answers in their real shape, over real HTTP (a scripted loopback API), read
 * through the provider as production reads them. The shapes follow hetznercloud/hcloud-go at
 * b8cfa39 (2026-08): hcloud/schema/server.go (Server, ServerPublicNet, ServerPrivateNet; `location`
 * at the top level — `datacenter` was removed from the API on 2026-07-01, commit 298cccc "remove
 * datacenter property from server", https://docs.hetzner.cloud/changelog#2026-07-01-removing-datacenters),
 * hcloud/schema/meta.go (MetaPagination), hcloud/schema/error.go (ErrorResponse) and
 * hcloud/client_handler_rate_limit.go (RateLimit-Limit/-Remaining/-Reset, Reset in Unix seconds).
 * The values are ours.
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { KopsError } from '../../errors.ts';
import type { ScriptedAnswer, ScriptedRequest } from '../scripted-api.test-support.ts';
import { scriptedProviders } from '../scripted-providers.test-support.ts';

const cluster = 'prod.example.com';
const closers: Array<() => unknown> = [];
after(async () => {
  for (const close of closers.reverse()) await close();
});
const scripted = scriptedProviders(cluster, closers);
/** The provider against a scripted API answering as `script` says. */
const hetzner = async (script: (r: ScriptedRequest) => ScriptedAnswer) =>
  (await scripted.hetzner(script)).provider;

/** A server record with the fields and nesting of hcloud-go's schema.Server (not all of them). */
function realServer(id: number, overrides: Record<string, unknown> = {}) {
  return {
    id,
    name: `nodes-fsn1-${id}`,
    status: 'running',
    created: '2026-08-01T10:00:00+00:00',
    public_net: {
      ipv4: { id: 9000 + id, ip: `203.0.113.${id % 250}`, blocked: false, dns_ptr: 'static.example' },
      ipv6: null,
      floating_ips: [],
      firewalls: [],
    },
    private_net: [
      { network: 4711, ip: `10.0.1.${id % 250}`, alias_ips: [], mac_address: '86:00:00:2a:7d:e0' },
    ],
    server_type: { id: 22, name: 'cpx21' },
    location: {
      id: 1,
      name: 'fsn1',
      description: 'Falkenstein DC Park 1',
      country: 'DE',
      city: 'Falkenstein',
      latitude: 50.47612,
      longitude: 12.370071,
      network_zone: 'eu-central',
    },
    labels: {
      'kops.k8s.io/cluster': cluster,
      'kops.k8s.io/instance-group': 'nodes-fsn1',
      'kops.k8s.io/instance-role': 'Node',
    },
    locked: false,
    volumes: [],
    load_balancers: [],
    ...overrides,
  };
}

/** Hetzner's RateLimit headers; Reset is a Unix timestamp in seconds. */
function rateHeaders(remaining: number): Record<string, string> {
  return {
    'RateLimit-Limit': '3600',
    'RateLimit-Remaining': String(remaining),
    'RateLimit-Reset': String(Math.ceil(Date.now() / 1000) + 3600 - remaining),
  };
}

test('GET /servers/{id} as the API answers since July 2026: the location is read from `location`', async () => {
  const provider = await hetzner((r) =>
    r.path === '/servers/42'
      ? { body: { server: realServer(42) }, headers: rateHeaders(3599) }
      : { status: 404, body: { error: { code: 'not_found', message: 'not found', details: {} } } },
  );
  const result = (await provider.nodeIdentifier.identify(['hcloud://42'])).get('hcloud://42');
  assert.ok(result?.ok, JSON.stringify(result));
  assert.equal(result.identity.instanceGroup, 'nodes-fsn1');
  assert.equal(result.identity.state, 'running');
  assert.equal(result.identity.zone, 'fsn1');
  assert.deepEqual(result.identity.addresses, [
    { type: 'InternalIP', address: '10.0.1.42' },
    { type: 'ExternalIP', address: '203.0.113.42' },
    { type: 'Hostname', address: 'nodes-fsn1-42' },
  ]);
  // The incarnation: the server's id and its `created` (hcloud-go schema.Server `Created time.Time`).
  assert.deepEqual(result.identity.incarnation, { id: '42', createdAt: new Date('2026-08-01T10:00:00Z') });
});

test('GET /servers?label_selector=…: pages follow meta.pagination.next_page, servers carry `location`', async () => {
  const queries: string[] = [];
  const provider = await hetzner((r) => {
    queries.push(`${r.path}?${r.query.toString()}`);
    const page = Number(r.query.get('page'));
    const ids = page === 1 ? Array.from({ length: 50 }, (_, i) => 101 + i) : [151, 152];
    return {
      body: {
        servers: ids.map((id) => realServer(id)),
        meta: {
          pagination: {
            page,
            per_page: 50,
            previous_page: page > 1 ? page - 1 : null,
            next_page: page === 1 ? 2 : null,
            last_page: 2,
            total_entries: 52,
          },
        },
      },
      headers: rateHeaders(3000),
    };
  });
  const servers = await provider.servers.listCluster();
  assert.equal(servers.length, 52);
  assert.ok(servers.every((s) => s.zone === 'fsn1' && s.instanceGroup === 'nodes-fsn1'));
  assert.deepEqual(queries, [
    '/servers?label_selector=kops.k8s.io%2Fcluster%3Dprod.example.com&page=1&per_page=50',
    '/servers?label_selector=kops.k8s.io%2Fcluster%3Dprod.example.com&page=2&per_page=50',
  ]);
});

test('a server without public IPv4 (`ipv4: null`) and without labels (`labels: {}`) is read, not a fault', async () => {
  const provider = await hetzner(() => ({
    body: { server: realServer(43, { public_net: { ipv4: null, ipv6: null }, labels: {} }) },
  }));
  const server = await provider.servers.get('43');
  assert.equal(server.clusterName, undefined);
  assert.deepEqual(
    server.addresses.map((a) => a.type),
    ['InternalIP', 'Hostname'],
  );
});

test('the error envelope and 429: not_found is not-found, rate_limit_exceeded is rate-limited with the code', async () => {
  const provider = await hetzner((r) =>
    r.path === '/servers/44'
      ? {
          status: 404,
          body: { error: { code: 'not_found', message: "server with ID '44' not found", details: {} } },
        }
      : {
          status: 429,
          body: {
            error: {
              code: 'rate_limit_exceeded',
              message: 'limit of 3600 requests per hour reached',
              details: {},
            },
          },
          headers: rateHeaders(0),
        },
  );
  await assert.rejects(provider.servers.get('44'), (err: unknown) => {
    assert.ok(err instanceof KopsError);
    assert.equal(err.kind, 'not-found');
    assert.match(err.message, /not_found: server with ID '44' not found/);
    return true;
  });
  await assert.rejects(provider.servers.get('45'), (err: unknown) => {
    assert.ok(err instanceof KopsError);
    assert.equal(err.kind, 'rate-limited');
    assert.match(err.message, /rate_limit_exceeded/);
    return true;
  });
});
