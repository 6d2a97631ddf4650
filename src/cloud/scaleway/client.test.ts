import assert from 'node:assert/strict';
import { after, before, beforeEach, test } from 'node:test';
import { Errors } from '@scaleway/sdk-client';
import { ConfigError, KopsError } from '../../errors.ts';
import { type ScalewaySimulator, startScalewaySimulator } from '../../sim/scaleway/simulator.ts';
import type { CloudCallRecorder } from '../metrics.ts';
import {
  createScalewayClients,
  regionOfZone,
  type ScalewayClientOptions,
  scalewayCredentialsFromEnv,
  scalewayError,
} from './client.ts';

let sim: ScalewaySimulator;
before(async () => {
  sim = await startScalewaySimulator();
});
after(() => sim.close());
beforeEach(() => {
  sim.clearCalls();
  sim.resetFaults();
});

function clients(options: Partial<ScalewayClientOptions> = {}) {
  return createScalewayClients({
    credentials: sim.credentials,
    retryDelayMs: 1,
    maxRetryWaitMs: 5,
    ...options,
  });
}

const kindOf = (err: unknown) => (err instanceof KopsError ? err.kind : undefined);

test('the SCW_* environment gives the credentials kops reads, and the zone', () => {
  const credentials = scalewayCredentialsFromEnv(sim.env);
  assert.deepEqual(credentials, sim.credentials);
  assert.equal(regionOfZone('nl-ams-2'), 'nl-ams');
  assert.equal(
    scalewayCredentialsFromEnv({ ...sim.env, SCW_API_URL: '' }).apiUrl,
    'https://api.scaleway.com',
  );
  assert.throws(
    () => scalewayCredentialsFromEnv({ SCW_DEFAULT_ZONE: 'fr-par-1' }),
    (err: unknown) =>
      err instanceof ConfigError &&
      /SCW_ACCESS_KEY, SCW_SECRET_KEY, SCW_DEFAULT_PROJECT_ID must be set/.test(err.message),
  );
  assert.throws(() => scalewayCredentialsFromEnv({ ...sim.env, SCW_DEFAULT_ZONE: '' }), /zone is unknown/);
  assert.throws(() => scalewayCredentialsFromEnv(sim.env, 'paris'), /not a zone/);
  assert.throws(
    () => createScalewayClients({ credentials: { ...sim.credentials, projectId: 'not-a-uuid' } }),
    (err: unknown) => err instanceof ConfigError,
  );
});

test('the SDK runs unchanged against the simulator; failures are typed errors', async () => {
  const c = clients();
  const server = sim.addServer({ name: 'n1', tags: ['a'] });
  const got = await c.call('get', () => c.instance.getServer({ zone: c.zone, serverId: server.id }));
  assert.equal(got.server?.name, 'n1');
  await assert.rejects(
    c.call('get', () =>
      c.instance.getServer({ zone: c.zone, serverId: '00000000-0000-4000-8000-000000000000' }),
    ),
    (err: unknown) => kindOf(err) === 'not-found',
  );
  const wrongKey = createScalewayClients({
    credentials: { ...sim.credentials, secretKey: '00000000-0000-4000-8000-000000000000' },
  });
  await assert.rejects(
    wrongKey.call('get', () => wrongKey.instance.getServer({ zone: c.zone, serverId: server.id })),
    (err: unknown) => kindOf(err) === 'unauthenticated',
  );
});

test('429 (reset_seconds honoured), 5xx and dropped connections are retried, then surface as faults', async () => {
  const c = clients({ retries: 2, maxRetryWaitMs: 1_000 });
  const server = sim.addServer({ name: 'n2' });
  const get = () => c.call('get', () => c.instance.getServer({ zone: c.zone, serverId: server.id }));
  sim.throttleNext(1, 1, 'servers.get');
  assert.equal((await get()).server?.name, 'n2');
  assert.equal(sim.count('servers.get'), 2, 'a reset_seconds within maxRetryWaitMs is waited out');
  // A wait longer than the client holds a caller fails at once, carrying the wait (a 503's Retry-After).
  sim.throttleNext(3, 7, 'servers.get');
  await assert.rejects(get(), (err: unknown) => {
    assert.equal(kindOf(err), 'rate-limited');
    assert.equal((err as KopsError).details?.['retryAfterSeconds'], 7);
    return true;
  });
  assert.equal(sim.count('servers.get'), 3);
  sim.resetFaults();
  sim.failNext(3, 503, 'servers.get');
  await assert.rejects(get(), (err: unknown) => kindOf(err) === 'unavailable');
  sim.dropNext(3, 'servers.get');
  await assert.rejects(get(), (err: unknown) => kindOf(err) === 'unavailable');
  sim.delayNext(1, 300, 'servers.get');
  const slow = clients({ retries: 0, timeoutMs: 20 });
  await assert.rejects(
    slow.call('get', () => slow.instance.getServer({ zone: c.zone, serverId: server.id })),
    (err: unknown) => kindOf(err) === 'timeout',
  );
});

test('each request is counted by API operation and result', async () => {
  const counted: string[] = [];
  const calls: CloudCallRecorder = {
    request: (_cloud, call, result) => counted.push(`${call}:${result}`),
    duration: () => undefined,
  };
  const c = clients({ calls, retries: 0 });
  await c.call('list', () => c.instance.listServers({ zone: c.zone, perPage: 10 }));
  await c.call('ips', () =>
    c.ipam.listIPs({ region: c.region, resourceId: '00000000-0000-4000-8000-000000000000' }),
  );
  sim.throttleNext(1, 1, 'servers.get');
  await assert.rejects(
    c.call('get', () =>
      c.instance.getServer({ zone: c.zone, serverId: '00000000-0000-4000-8000-000000000000' }),
    ),
  );
  assert.deepEqual(counted, ['instance.listServers:ok', 'ipam.listIPs:ok', 'instance.getServer:throttled']);
});

test("a 429 whose body the SDK does not recognise (no help_message) still carries the body's reset_seconds", () => {
  // The SDK makes a TooManyRequestsError, with resetSeconds, only of a body with a help_message; any
  // other 429 is a plain ScalewayError whose parsed body still says how long to wait.
  const bare = new Errors.ScalewayError(429, {
    type: 'too_many_requests',
    message: 'quota exceeded',
    reset_seconds: 7,
  });
  const err = scalewayError('get server', bare);
  assert.equal(kindOf(err), 'rate-limited');
  assert.equal(err.details?.['retryAfterSeconds'], 7);
  const silent = scalewayError('get server', new Errors.ScalewayError(429, { message: 'slow down' }));
  assert.equal(kindOf(silent), 'rate-limited');
  assert.equal(silent.details?.['retryAfterSeconds'], undefined);
});

test("a 4xx without Scaleway's own error body (a proxy's page) is a fault; Scaleway's own 404 is not-found", () => {
  const page = scalewayError('get server', new Errors.ScalewayError(404, '<html>Not Found</html>'));
  assert.equal(kindOf(page), 'unavailable');
  const own = scalewayError(
    'get server',
    new Errors.ScalewayError(404, {
      message: 'resource is not found',
      type: 'not_found',
      resource: 'instance_server',
    }),
  );
  assert.equal(kindOf(own), 'not-found');
});
