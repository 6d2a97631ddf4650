import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { OAuth2Client } from 'google-auth-library';
import {
  ConfigError,
  exitCodeOf,
  KopsError,
  NotFoundError,
  UnauthenticatedError,
  UnavailableError,
} from '../errors.ts';
import { startGcsSim } from '../sim/gcs/server.ts';
import { withLocalGoogleCredentials } from '../testing/google-env.ts';
import { outcomeWithin, silentServer } from '../testing/silent-server.ts';
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

  test('missing credentials are typed as the compute client types them: an unreadable file 78, none at all 69', async () => {
    const store = () => new GcsVfs(new URL('gs://state/c1'), { endpoint: sim.endpoint, timeoutMs: 5_000 });
    await withLocalGoogleCredentials({ GOOGLE_APPLICATION_CREDENTIALS: '/nonexistent/key.json' }, () =>
      assert.rejects(
        store().read('config'),
        (err: unknown) =>
          err instanceof ConfigError &&
          exitCodeOf(err) === 78 &&
          /^cannot read gs:\/\/state\/c1\/config: the Google credentials file \/nonexistent\/key\.json/.test(
            err.message,
          ),
      ),
    );
    await withLocalGoogleCredentials({}, () =>
      assert.rejects(
        store().stat('config'),
        (err: unknown) =>
          err instanceof UnavailableError &&
          exitCodeOf(err) === 69 &&
          /^cannot stat gs:\/\/state\/c1\/config: no Google credentials/.test(err.message),
      ),
    );
  });

  test('polling uses metadata requests, not downloads', async () => {
    const before = sim.requestCounts()['objects.get'] ?? 0;
    await vfs().stat('config');
    assert.equal((sim.requestCounts()['objects.get'] ?? 0) - before, 1);
  });
});

describe('GCS that accepts the connection and never answers', () => {
  /** Asserts that `work` ends as a timeout of `what` well within a few seconds of its 300 ms deadline. */
  async function timesOut(what: string, work: Promise<unknown>): Promise<void> {
    const started = Date.now();
    const outcome = await outcomeWithin(work, 5_000);
    assert.ok(!outcome.pending, `the ${what} was still pending 5 s after its 300 ms deadline`);
    assert.ok(Date.now() - started < 2_000, `${what} answered after ${Date.now() - started} ms`);
    const { error } = outcome;
    assert.ok(error instanceof KopsError, String(error));
    assert.equal(error.kind, 'timeout', error.message);
    assert.match(error.message, /no answer within 300 ms/);
  }

  test('a storage endpoint that never answers: the read ends at the deadline as a timeout', async () => {
    const silent = await silentServer();
    const { endpoint } = silent;
    try {
      const store = new GcsVfs(new URL('gs://state/c1'), {
        endpoint,
        auth: auth('good-token'),
        timeoutMs: 300,
      });
      await timesOut('read', store.read('igconfig/node/nodes/nodeupconfig.yaml'));
      const deadline = Date.now() + 2_000;
      while (silent.open() > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      assert.equal(silent.open(), 0, 'the abandoned request still holds its connection');
    } finally {
      silent.close();
    }
  });

  test('the deadline is on the monotonic clock: a wall clock stepped back while the credentials come does not prolong it', async (t) => {
    const silent = await silentServer();
    // The wall clock is mocked (and still), and stepped back 2 h as the credentials arrive.
    t.mock.timers.enable({ apis: ['Date'], now: Date.now() });
    try {
      const stepping = {
        getRequestHeaders: async () => {
          t.mock.timers.setTime(Date.now() - 7_200_000);
          return new Headers({ authorization: 'Bearer good-token' });
        },
      };
      const store = new GcsVfs(new URL('gs://state/c1'), {
        endpoint: silent.endpoint,
        auth: stepping,
        timeoutMs: 300,
      });
      await timesOut('read', store.read('config'));
    } finally {
      t.mock.timers.reset();
      silent.close();
    }
  });

  test('credentials that never come (a silent metadata or token endpoint): the read ends at the same deadline', async () => {
    const stuck = { getRequestHeaders: () => new Promise<Headers>(() => {}) };
    const store = new GcsVfs(new URL('gs://state/c1'), {
      endpoint: sim.endpoint,
      auth: stuck,
      timeoutMs: 300,
    });
    await timesOut('read', store.read('config'));
    await timesOut('stat', store.stat('config'));
  });
});
