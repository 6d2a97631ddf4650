import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { OAuth2Client } from 'google-auth-library';
import { NotFoundError, UnauthenticatedError, UnavailableError } from '../errors.ts';
import { startGcsSim } from '../sim/gcs/server.ts';
import { GcsVfs } from './gcs-vfs.ts';

const sim = await startGcsSim({ buckets: ['state'], token: 'good-token' });
after(() => sim.close());

function auth(token: string): OAuth2Client {
  const client = new OAuth2Client();
  client.setCredentials({ access_token: token, expiry_date: Date.now() + 3_600_000 });
  return client;
}
const vfs = (url = 'gs://state/c1', token = 'good-token', endpoint = sim.endpoint) =>
  new GcsVfs(new URL(url), { endpoint, auth: auth(token), timeoutMs: 5_000 });

describe('GCS backend', () => {
  test('the version is the object generation and changes on every write', async () => {
    await vfs().write('config', 'a');
    const first = await vfs().stat('config');
    assert.match(first!, /^\d+$/);
    await vfs().write('config', 'a');
    const second = await vfs().stat('config');
    assert.ok(BigInt(second!) > BigInt(first!));
    assert.equal((await vfs().read('config')).version, second);
  });

  test('object names with spaces and unusual characters round-trip', async () => {
    await vfs().write('instancegroup/with space+plus%percent', 'odd');
    assert.equal(sim.getObject('state', 'c1/instancegroup/with space+plus%percent')?.toString(), 'odd');
    assert.equal((await vfs().read('instancegroup/with space+plus%percent')).data.toString(), 'odd');
    assert.deepEqual(await vfs().list('instancegroup/with'), ['instancegroup/with space+plus%percent']);
  });

  test('lists past one page of results', async () => {
    for (let i = 0; i < 1003; i++) sim.putObject('state', `paged/pki/${String(i).padStart(4, '0')}`, 'x');
    const names = await vfs('gs://state/paged').list('pki/');
    assert.equal(names.length, 1003);
    assert.equal(names[0], 'pki/0000');
  });

  test('a rejected token is an authentication error', async () => {
    await assert.rejects(
      vfs('gs://state/c1', 'stolen-token').read('config'),
      (err: unknown) =>
        err instanceof UnauthenticatedError && /no valid Google credentials/.test(err.message),
    );
  });

  test('a missing bucket is NotFound; an outage or dead endpoint is Unavailable', async () => {
    await assert.rejects(vfs('gs://no-such-bucket/c1').read('config'), NotFoundError);
    sim.failNext(1);
    await assert.rejects(
      vfs().read('config'),
      (err: unknown) => err instanceof UnavailableError && /HTTP 503/.test(err.message),
    );
    await assert.rejects(
      vfs('gs://state/c1', 'good-token', 'http://127.0.0.1:9').stat('config'),
      UnavailableError,
    );
  });

  test('polling uses metadata requests, not downloads', async () => {
    const before = sim.requestCounts()['objects.get'] ?? 0;
    await vfs().stat('config');
    assert.equal((sim.requestCounts()['objects.get'] ?? 0) - before, 1);
  });
});
