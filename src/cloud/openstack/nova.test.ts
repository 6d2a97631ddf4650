import assert from 'node:assert/strict';
import { after, before, beforeEach, test } from 'node:test';
import { KopsError, NotFoundError } from '../../errors.ts';
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
