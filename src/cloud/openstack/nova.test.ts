import assert from 'node:assert/strict';
import { after, before, beforeEach, test } from 'node:test';
import { KopsError, NotFoundError } from '../../errors.ts';
import { sendJson } from '../../sim/cloud-sim.ts';
import { type OpenStackSimulator, startOpenStackSimulator } from '../../sim/openstack/simulator.ts';
import type { CloudCallRecorder } from '../metrics.ts';
import { openstackAuthFromEnv } from './auth.ts';
import { KeystoneSession } from './keystone.ts';
import { NovaClient, type NovaClientOptions } from './nova.ts';

let sim: OpenStackSimulator;
let foreignId: string;

before(async () => {
  sim = await startOpenStackSimulator({ maxLimit: 4 });
  for (let i = 0; i < 10; i++) sim.addServer({ name: `node-${i}`, fixed: [`10.0.0.${i + 10}`] });
  foreignId = sim.addServer({ name: 'elsewhere', project: 'another-project' }).id;
});
after(() => sim.close());
beforeEach(() => {
  sim.clearCalls();
  sim.resetFaults();
});

function nova(options: Partial<NovaClientOptions> = {}, auth = openstackAuthFromEnv(sim.env)): NovaClient {
  return new NovaClient({ session: new KeystoneSession({ auth }), retryDelayMs: 1, ...options });
}

function kindOf(err: unknown): string | undefined {
  return err instanceof KopsError ? err.kind : undefined;
}

test('the OS_* environment authenticates with Keystone and finds Nova in the catalog', async () => {
  const server = sim.addServer({ name: 'one' });
  assert.equal((await nova().getServer(server.id)).name, 'one');
  assert.equal(sim.count('tokens.create'), 1);
});

test('an application credential authenticates too', async () => {
  const [first] = await nova({}, sim.applicationCredentialAuth).listServers();
  assert.ok(first);
});

test("servers are listed page by page with limit and marker, and only the project's own", async () => {
  const servers = await nova({ pageSize: 100 }).listServers();
  const names = servers.map((s) => s.name);
  assert.ok(names.includes('node-9'));
  assert.ok(!names.includes('elsewhere'));
  // Nova clamps the page to osapi_max_limit (4 here) and links the next page by marker.
  const pages = sim.calls.filter((c) => c.operation === 'servers.list');
  assert.equal(pages.length, Math.floor(servers.length / 4) + 1);
  assert.match(pages[1]?.path ?? '', /marker=/);
});

test('a server of another project, or none, is NotFoundError', async () => {
  const client = nova();
  await assert.rejects(client.getServer('does-not-exist'), NotFoundError);
  await assert.rejects(client.getServer(foreignId), NotFoundError);
  await assert.rejects(client.getServer('../servers/detail'), (err: unknown) => kindOf(err) === 'invalid');
});

test("an admin token reads another project's server, which the client refuses as foreign-cluster", async () => {
  sim.setAdmin(true);
  try {
    const client = nova();
    await assert.rejects(client.getServer(foreignId), (err: unknown) => {
      assert.ok(err instanceof KopsError);
      assert.equal(err.kind, 'forbidden');
      assert.equal(err.reasonCode, 'foreign-cluster');
      assert.match(err.message, /is in project another-project, not this controller's project/);
      return true;
    });
    assert.equal(sim.count('servers.get'), 1, "Nova did answer it: the refusal is the client's");
    const own = sim.addServer({ name: 'own' });
    assert.equal((await client.getServer(own.id)).tenant_id, sim.projectId);
  } finally {
    sim.setAdmin(false);
  }
});

test('wrong credentials are unauthenticated, not retried', async () => {
  const auth = openstackAuthFromEnv({ ...sim.env, OS_PASSWORD: 'wrong' });
  await assert.rejects(nova({}, auth).listServers(), (err: unknown) => kindOf(err) === 'unauthenticated');
  assert.equal(sim.count('tokens.create'), 1);
});

test('a revoked token is replaced once and the call succeeds', async () => {
  const client = nova();
  await client.listServers();
  sim.revokeTokens();
  sim.clearCalls();
  await client.listServers();
  assert.equal(sim.count('tokens.create'), 1);
});

test('429 and 5xx are retried (Retry-After honoured), then surface as rate-limited / unavailable', async () => {
  const server = sim.addServer({ name: 'retried' });
  const client = nova({ maxRetryWaitMs: 1_000 });
  sim.throttleNext(1, 1, 'servers.get');
  assert.equal((await client.getServer(server.id)).name, 'retried');
  assert.equal(sim.count('servers.get'), 2, 'a Retry-After within maxRetryWaitMs is waited out');

  // A wait longer than the client holds a caller fails at once, carrying the wait (a 503's Retry-After).
  sim.throttleNext(4, 1, 'servers.get');
  await assert.rejects(nova({ maxRetryWaitMs: 5 }).getServer(server.id), (err: unknown) => {
    assert.equal(kindOf(err), 'rate-limited');
    assert.equal((err as KopsError).details?.['retryAfterSeconds'], 1);
    return true;
  });
  assert.equal(sim.count('servers.get'), 3);
  sim.resetFaults();
  sim.failNext(4, 503, 'servers.get');
  await assert.rejects(client.getServer(server.id), (err: unknown) => kindOf(err) === 'unavailable');
  sim.dropNext(4, 'servers.get');
  await assert.rejects(client.getServer(server.id), (err: unknown) => {
    assert.equal(kindOf(err), 'unavailable', String(err));
    return true;
  });
  assert.equal(sim.count('servers.get'), 11);
});

test('calls are counted by operation and result', async () => {
  const counted: string[] = [];
  const calls: CloudCallRecorder = {
    request: (_cloud, call, result) => counted.push(`${call}:${result}`),
    duration: () => undefined,
  };
  const client = new NovaClient({ session: new KeystoneSession({ auth: sim.passwordAuth, calls }), calls });
  await assert.rejects(client.getServer('missing'), NotFoundError);
  assert.deepEqual(counted, ['tokens.create:ok', 'servers.get:rejected']);
});

test('servers.get answered with another server is a fault, never that server under the asked id', async () => {
  const asked = sim.addServer({ name: 'asked', fixed: ['10.0.9.1'] });
  const other = sim.addServer({ name: 'other', fixed: ['10.0.9.2'] });
  sim.answerGetWith(asked.id, other.id);
  try {
    await assert.rejects(
      nova({ retries: 0 }).getServer(asked.id),
      (err: unknown) => kindOf(err) === 'unavailable',
    );
  } finally {
    sim.answerGetWith(asked.id, undefined);
  }
});

/**
 * A server record as the real Nova (microversion 2.1, the one the client gets: it sends no
 * microversion header) answers it, with our own values: every field of
 * openstack/nova doc/api_samples/servers/server-get-resp.json, and an `addresses` entry with its
 * `OS-EXT-IPS-MAC:mac_addr` (nova/api/openstack/compute/views/ips.py).
 */
function realShapedServer(id: string, tenantId: string, overrides: Record<string, unknown> = {}) {
  return {
    accessIPv4: '',
    accessIPv6: '',
    addresses: {
      'kops-net': [
        {
          addr: '10.0.7.1',
          'OS-EXT-IPS-MAC:mac_addr': 'fa:16:3e:00:00:01',
          'OS-EXT-IPS:type': 'fixed',
          version: 4,
        },
        {
          addr: '203.0.113.7',
          'OS-EXT-IPS-MAC:mac_addr': 'fa:16:3e:00:00:01',
          'OS-EXT-IPS:type': 'floating',
          version: 4,
        },
      ],
    },
    created: '2024-05-01T10:00:00Z',
    flavor: { id: '3', links: [{ href: 'http://nova.invalid/flavors/3', rel: 'bookmark' }] },
    hostId: 'a'.repeat(56),
    id,
    image: { id: 'image-1', links: [{ href: 'http://nova.invalid/images/image-1', rel: 'bookmark' }] },
    key_name: null,
    links: [{ href: `http://nova.invalid/v2.1/servers/${id}`, rel: 'self' }],
    metadata: { KubernetesCluster: 'c.example.com', KopsInstanceGroup: 'nodes', KopsRole: 'Node' },
    name: 'nodes-1',
    config_drive: '',
    'OS-DCF:diskConfig': 'MANUAL',
    'OS-EXT-AZ:availability_zone': 'nova',
    'OS-EXT-STS:power_state': 1,
    'OS-EXT-STS:task_state': null,
    'OS-EXT-STS:vm_state': 'active',
    'os-extended-volumes:volumes_attached': [],
    'OS-SRV-USG:launched_at': '2024-05-01T10:00:30.000000',
    'OS-SRV-USG:terminated_at': null,
    progress: 0,
    security_groups: [{ name: 'default' }],
    status: 'ACTIVE',
    tenant_id: tenantId,
    updated: '2024-05-01T10:00:31Z',
    user_id: 'user-1',
    ...overrides,
  };
}

/** Whether `err` is a malformed answer: a fault (unavailable), never a verdict on a server. */
function isMalformed(err: unknown): boolean {
  return err instanceof KopsError && err.kind === 'unavailable' && err.reasonCode === 'malformed-answer';
}

test('a real-shaped Nova record (every field of the api-ref sample) is read, on a read and in a listing', async () => {
  const id = sim.addServer({ name: 'real-shaped' }).id;
  const record = realShapedServer(id, sim.projectId);
  sim.answerWith('servers.get', (_req, res) => sendJson(res, 200, { server: record }));
  sim.answerWith('servers.list', (_req, res) => sendJson(res, 200, { servers: [record] }));
  try {
    const client = nova({ retries: 0 });
    for (const server of [await client.getServer(id), ...(await client.listServers())]) {
      assert.equal(server.id, id);
      assert.equal(server.name, 'nodes-1');
      assert.equal(server.status, 'ACTIVE');
      assert.equal(server.tenant_id, sim.projectId);
      assert.deepEqual(server.metadata, record.metadata);
      assert.deepEqual(
        server.addresses?.['kops-net']?.map((a) => [a.addr, a['OS-EXT-IPS:type']]),
        [
          ['10.0.7.1', 'fixed'],
          ['203.0.113.7', 'floating'],
        ],
      );
      assert.equal(server['OS-EXT-AZ:availability_zone'], 'nova');
    }
  } finally {
    sim.answerWith('servers.get', undefined);
    sim.answerWith('servers.list', undefined);
  }
});

test('a Nova record of a shape Nova never sends is a malformed answer (a fault), on a read and in a listing', async () => {
  const id = sim.addServer({ name: 'typed' }).id;
  const real = realShapedServer(id, sim.projectId);
  // Nova's metadata values are strings (nova/api/validation/parameter_types.py `metadata`; gophercloud's
  // Server.Metadata is map[string]string, so kops fails to read any other); id, name, status and
  // tenant_id are strings and addresses map a network to a list of {addr, version}
  // (nova/api/openstack/compute/views/servers.py, views/ips.py).
  const variants: Record<string, unknown>[] = [
    { metadata: { ...real.metadata, KopsInstanceGroup: 5 } },
    { metadata: { ...real.metadata, KubernetesCluster: ['c.example.com'] } },
    { metadata: ['KopsInstanceGroup'] },
    { status: 1 },
    { status: undefined },
    { name: 7 },
    { tenant_id: 7 },
    { addresses: { 'kops-net': [{ addr: 10, version: 4 }] } },
    { addresses: { 'kops-net': 'x' } },
    { addresses: [] },
    { 'OS-EXT-AZ:availability_zone': false },
  ];
  const client = nova({ retries: 0 });
  try {
    for (const fields of variants) {
      const record = { ...real, ...fields };
      sim.answerWith('servers.get', (_req, res) => sendJson(res, 200, { server: record }));
      sim.answerWith('servers.list', (_req, res) => sendJson(res, 200, { servers: [record] }));
      await assert.rejects(client.getServer(id), isMalformed, JSON.stringify(fields));
      await assert.rejects(client.listServers(), isMalformed, JSON.stringify(fields));
    }
    // A 200 without the record or the list (real Nova always sends them) says nothing about any server.
    for (const body of [{}, { server: 'x' }, { server: null }]) {
      sim.answerWith('servers.get', (_req, res) => sendJson(res, 200, body));
      await assert.rejects(client.getServer(id), isMalformed, JSON.stringify(body));
    }
    for (const body of [{}, { servers: {} }, { servers: [null] }, { servers: [], servers_links: {} }]) {
      sim.answerWith('servers.list', (_req, res) => sendJson(res, 200, body));
      await assert.rejects(client.listServers(), isMalformed, JSON.stringify(body));
    }
  } finally {
    sim.answerWith('servers.get', undefined);
    sim.answerWith('servers.list', undefined);
  }
});

test("a 404 without OpenStack's error body (an endpoint that is not Nova's, a proxy's page) is a fault; Nova's own 404 still says the server does not exist", async () => {
  const id = sim.addServer({ name: 'behind-a-proxy' }).id;
  sim.answerWith('servers.get', (_req, res) => {
    res.writeHead(404, { 'content-type': 'text/html' });
    res.end('<html><body>404 Not Found</body></html>');
  });
  try {
    await assert.rejects(nova({ retries: 0 }).getServer(id), (err: KopsError) => {
      assert.equal(err.kind, 'unavailable', err.message);
      return true;
    });
  } finally {
    sim.answerWith('servers.get', undefined);
  }
  await assert.rejects(nova({ retries: 0 }).getServer('00000000-0000-4000-8000-00000000dead'), NotFoundError);
});
