/**
 * The Hetzner, DigitalOcean and Linode APIs answering wrongly, over real HTTP (a scripted loopback
 * API): paging that never ends, another server than the one asked for, the same server twice,
 * wrong-typed labels and tags, instance group names kops never writes, 200s that carry an error or
 * no JSON. None may give a node a wrong identity or group, loop, grow without bound, crash, or turn a
 * broken answer into a denial; the request counter says `error` for an answer that was unusable.
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { Registry } from 'prom-client';
import { KopsError } from '../errors.ts';
import { cloudRequests } from '../testing/cloud-calls.ts';
import { scriptedProviders } from './scripted-providers.test-support.ts';

const cluster = 'c.example.com';
const closers: Array<() => unknown> = [];
after(async () => {
  for (const close of closers.reverse()) await close();
});
const { hetzner, digitalOcean: digitalocean, linode: linodeApi } = scriptedProviders(cluster, closers);

function hetznerServer(id: number, group: unknown = 'nodes', extra: Record<string, unknown> = {}) {
  return {
    id,
    name: `node-${id}`,
    status: 'running',
    private_net: [{ network: 1, ip: `10.0.0.${id % 250}` }],
    labels: { 'kops.k8s.io/cluster': cluster, 'kops.k8s.io/instance-group': group },
    ...extra,
  };
}

function errorOf(result: { ok: boolean; error?: Error } | undefined): KopsError {
  assert.ok(result && !result.ok, `expected a refusal, got ${JSON.stringify(result)}`);
  assert.ok(result.error instanceof KopsError, `not a typed error: ${result.error}`);
  return result.error;
}

test('Hetzner: a read by id answered with another server is never the asked node identity, nor cached', async () => {
  const { api, provider } = await hetzner((r) =>
    r.path === '/servers/5'
      ? { body: { server: hetznerServer(6, 'control-plane-a') } }
      : { status: 404, body: {} },
  );
  for (let i = 0; i < 2; i++) {
    const result = (await provider.nodeIdentifier.identify(['hcloud://5'], { maxAgeMs: 0 })).get(
      'hcloud://5',
    );
    const error = errorOf(result);
    assert.equal(error.kind, 'unavailable', error.message);
    assert.match(error.message, /read of Hetzner server 5 answered Hetzner server 6/);
  }
  // Not answered from a cache either: each lookup read again.
  const cached = (await provider.nodeIdentifier.identify(['hcloud://6'])).get('hcloud://6');
  assert.equal(cached?.ok, false);
  assert.equal(api.served, 3);
});

test('Hetzner: a 200 carrying the error envelope is a fault, not an empty cluster or a missing server', async () => {
  const { provider } = await hetzner(() => ({
    body: { error: { code: 'service_error', message: 'proxy glitch' } },
  }));
  // Two nodes: a list; one node: a read by id.
  const listed = await provider.nodeIdentifier.identify(['hcloud://1', 'hcloud://2', 'hcloud://3']);
  for (const result of listed.values()) assert.equal(errorOf(result).kind, 'unavailable');
  const single = (await provider.nodeIdentifier.identify(['hcloud://9'], { maxAgeMs: 0 })).get('hcloud://9');
  assert.equal(errorOf(single).kind, 'unavailable');
});

test('Hetzner: empty pages that always name a next page end the listing with a fault', async () => {
  const { api, provider } = await hetzner((r) => {
    const page = Number(r.query.get('page'));
    // A guard so today's code ends at all: 3,000 pages.
    return { body: { servers: [], meta: { pagination: { next_page: r.served < 3_000 ? page + 1 : null } } } };
  });
  await assert.rejects(provider.cloudGroups.list(cluster), (err: KopsError) => err.kind === 'unavailable');
  assert.ok(api.served <= 3, `${api.served} pages read`);
});

test('Hetzner: a page repeated under ever-new page numbers ends the listing with a fault', async () => {
  const { api, provider } = await hetzner((r) => {
    const page = Number(r.query.get('page'));
    return {
      body: {
        servers: [hetznerServer(1), hetznerServer(2)],
        meta: { pagination: { next_page: r.served < 3_000 ? page + 1 : null } },
      },
    };
  });
  await assert.rejects(provider.cloudGroups.list(cluster), (err: KopsError) => err.kind === 'unavailable');
  assert.ok(api.served <= 3, `${api.served} pages read`);
});

test('Hetzner: the same server listed twice with different groups is refused, not answered by the last', async () => {
  const { provider } = await hetzner(() => ({
    body: {
      servers: [hetznerServer(1, 'nodes'), hetznerServer(2), hetznerServer(1, 'control-plane-a')],
      meta: { pagination: { next_page: null } },
    },
  }));
  const results = await provider.nodeIdentifier.identify(['hcloud://1', 'hcloud://2', 'hcloud://3']);
  assert.equal(errorOf(results.get('hcloud://1')).kind, 'unavailable');
  assert.equal(results.get('hcloud://2')?.ok, true);
  const groups = await provider.cloudGroups.list(cluster);
  assert.deepEqual(
    groups.map((g) => [g.instanceGroup, g.members.map((m) => m.instanceId)]),
    [['nodes', ['2']]],
  );
});

test('Hetzner: a group label that is not a string, or not a kops name, never becomes an instance group', async () => {
  const groups: unknown[] = [
    7,
    null,
    ['nodes'],
    { name: 'nodes' },
    '../../cluster',
    'a/b',
    'x'.repeat(300),
    'Nodes',
  ];
  const { provider } = await hetzner((r) => {
    const id = Number(r.path.split('/').at(-1));
    return { body: { server: hetznerServer(id, groups[id - 1]) } };
  });
  for (let id = 1; id <= groups.length; id++) {
    const providerID = `hcloud://${id}`;
    const result = (await provider.nodeIdentifier.identify([providerID], { maxAgeMs: 0 })).get(providerID);
    const error = errorOf(result);
    assert.ok(['unavailable', 'forbidden'].includes(error.kind), `${id}: ${error.kind} ${error.message}`);
    assert.ok(error.message.length < 400, error.message);
  }
});

test('Hetzner: a server record with a wrong-typed id, status or addresses is refused, not crashed on', async () => {
  const records: unknown[] = [
    { ...hetznerServer(1), id: '1' },
    { ...hetznerServer(2), status: 7 },
    { ...hetznerServer(3), private_net: 'x' },
    { ...hetznerServer(4), labels: ['kops.k8s.io/cluster'] },
    null,
  ];
  const { provider } = await hetzner((r) => {
    const id = Number(r.path.split('/').at(-1));
    return { body: { server: records[id - 1] } };
  });
  for (let id = 1; id <= records.length; id++) {
    const providerID = `hcloud://${id}`;
    const result = (await provider.nodeIdentifier.identify([providerID], { maxAgeMs: 0 })).get(providerID);
    assert.equal(errorOf(result).kind, 'unavailable', `record ${id}`);
  }
});

test('Hetzner: a 200 that is not JSON is counted as an error, not ok', async () => {
  const registry = new Registry();
  const { provider } = await hetzner(() => ({ body: '{"server": {"id": 1, "na', raw: true }), registry);
  const result = (await provider.nodeIdentifier.identify(['hcloud://1'], { maxAgeMs: 0 })).get('hcloud://1');
  assert.equal(errorOf(result).kind, 'unavailable');
  const counted = await cloudRequests(registry);
  assert.equal(counted['hetzner servers.get error'], 1, JSON.stringify(counted));
  assert.equal(counted['hetzner servers.get ok'], undefined, JSON.stringify(counted));
});

function droplet(id: number, group = 'nodes') {
  return {
    id,
    name: `node-${id}`,
    status: 'active',
    networks: { v4: [{ ip_address: `10.0.1.${id % 250}`, type: 'private' }] },
    tags: ['KubernetesCluster:c-example-com', `kops-instancegroup:${group}`],
  };
}

test('DigitalOcean: a next link that never goes away over the same droplets ends with a fault', async () => {
  const { api, provider } = await digitalocean((r) => ({
    body: {
      droplets: [droplet(1), droplet(2)],
      links: r.served < 3_000 ? { pages: { next: 'https://api.digitalocean.com/v2/droplets?page=2' } } : {},
    },
  }));
  await assert.rejects(provider.cloudGroups.list(cluster), (err: KopsError) => err.kind === 'unavailable');
  assert.ok(api.served <= 3, `${api.served} pages read`);
});

test('DigitalOcean: a read by id answered with another droplet is never the asked node identity', async () => {
  const { provider } = await digitalocean(() => ({ body: { droplet: droplet(8, 'control-plane-a') } }));
  const result = (await provider.nodeIdentifier.identify(['digitalocean://7'], { maxAgeMs: 0 })).get(
    'digitalocean://7',
  );
  assert.equal(errorOf(result).kind, 'unavailable');
});

test('DigitalOcean: tags that are not strings are refused, not crashed on', async () => {
  const { provider } = await digitalocean(() => ({
    body: {
      droplet: {
        ...droplet(7),
        tags: [7, null, 'KubernetesCluster:c-example-com', 'kops-instancegroup:nodes'],
      },
    },
  }));
  const result = (await provider.nodeIdentifier.identify(['digitalocean://7'], { maxAgeMs: 0 })).get(
    'digitalocean://7',
  );
  assert.equal(errorOf(result).kind, 'unavailable');
});

function linode(id: number, group = 'nodes') {
  return {
    id,
    label: `node-${id}`,
    status: 'running',
    ipv4: [`192.168.0.${id % 250}`],
    ipv6: null,
    tags: [`kops.k8s.io/cluster:${cluster}`, `kops.k8s.io/instance-group:${group}`],
    region: 'us-ord',
  };
}

test('Linode: a page count that lies (a billion pages of nothing) ends the listing with a fault', async () => {
  const { api, provider } = await linodeApi((r) =>
    r.served < 3_000
      ? { body: { data: [], page: Number(r.query.get('page')), pages: 1_000_000_000, results: 0 } }
      : { status: 500, body: { errors: [{ reason: 'guard' }] } },
  );
  await assert.rejects(provider.cloudGroups.list(cluster), (err: KopsError) => err.kind === 'unavailable');
  assert.ok(api.served <= 3, `${api.served} pages read`);
});

test('Linode: a filter that matches nothing is `pages: 0` with no data, as the API answers it: an empty cluster, not a fault', async () => {
  const { api, provider } = await linodeApi(() => ({ body: { data: [], page: 1, pages: 0, results: 0 } }));
  assert.deepEqual(await provider.cloudGroups.list(cluster), []);
  assert.equal(api.served, 1);
  // `pages: 0` with instances is no answer the API gives.
  const { provider: lying } = await linodeApi(() => ({
    body: { data: [{ id: 1, label: 'x', status: 'running', tags: [] }], page: 1, pages: 0, results: 1 },
  }));
  await assert.rejects(lying.cloudGroups.list(cluster), (err: KopsError) => err.kind === 'unavailable');
});

test('Linode: a 200 that is not JSON is a fault and counted as an error, never an empty cluster', async () => {
  const registry = new Registry();
  await linodeApi(() => ({ body: '<html>proxy error</html>', raw: true }), registry).then(
    async ({ provider }) => {
      const listed = await provider.nodeIdentifier.identify(['linode://1', 'linode://2', 'linode://3']);
      for (const result of listed.values()) assert.equal(errorOf(result).kind, 'unavailable');
      const single = (await provider.nodeIdentifier.identify(['linode://4'], { maxAgeMs: 0 })).get(
        'linode://4',
      );
      assert.equal(errorOf(single).kind, 'unavailable');
    },
  );
  const counted = await cloudRequests(registry);
  assert.equal(counted['linode linode.instances.list ok'], undefined, JSON.stringify(counted));
  assert.equal(counted['linode linode.instances.get ok'], undefined, JSON.stringify(counted));
});

test('Linode: tags that are not strings are refused, not crashed on', async () => {
  const { provider } = await linodeApi(() => ({
    body: { ...linode(4), tags: [null, 4, ...linode(4).tags] },
  }));
  const result = (await provider.nodeIdentifier.identify(['linode://4'], { maxAgeMs: 0 })).get('linode://4');
  assert.equal(errorOf(result).kind, 'unavailable');
});

test('Linode: a read by id answered with another instance is never the asked node identity', async () => {
  const { provider } = await linodeApi(() => ({ body: linode(5, 'control-plane-a') }));
  const result = (await provider.nodeIdentifier.identify(['linode://4'], { maxAgeMs: 0 })).get('linode://4');
  assert.equal(errorOf(result).kind, 'unavailable');
});

test("a 404 or 400 without the API's own error body (a wrong endpoint, a proxy's page) is a fault, never a verdict on the node; the API's own 404 still says the server does not exist", async () => {
  const page = { body: '<html><body>404 page not found</body></html>', raw: true };
  const cases = [
    ['Hetzner', await hetzner(() => ({ status: 404, ...page })), 'hcloud://7'],
    ['Hetzner 400', await hetzner(() => ({ status: 400, ...page })), 'hcloud://7'],
    ['DigitalOcean', await digitalocean(() => ({ status: 404, ...page })), 'digitalocean://7'],
    ['Linode', await linodeApi(() => ({ status: 404, ...page })), 'linode://7'],
  ] as const;
  for (const [what, { provider }, id] of cases) {
    const error = errorOf((await provider.nodeIdentifier.identify([id])).get(id));
    assert.equal(error.kind, 'unavailable', `${what}: ${error.message}`);
  }
  const own = await hetzner(() => ({
    status: 404,
    body: { error: { code: 'not_found', message: 'server with ID 7 not found', details: {} } },
  }));
  assert.equal(
    errorOf((await own.provider.nodeIdentifier.identify(['hcloud://7'])).get('hcloud://7')).kind,
    'not-found',
  );
});
