import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import {
  ForbiddenError,
  KopsError,
  NotFoundError,
  UnauthenticatedError,
  UnavailableError,
} from '../errors.ts';
import { startS3Sim } from '../sim/s3/server.ts';
import { outcomeWithin, silentServer } from '../testing/silent-server.ts';
import { S3Vfs, type S3VfsOptions } from './s3-vfs.ts';

const sim = await startS3Sim({ buckets: ['state'] });
after(() => sim.close());
const options: S3VfsOptions = { endpoint: sim.endpoint, region: 'us-test-1', credentials: sim.credentials };
const vfs = (url = 's3://state/c1', o: S3VfsOptions = options) => new S3Vfs(new URL(url), o);

describe('S3 backend', () => {
  test('the version is the ETag, and polling uses HeadObject only', async () => {
    await vfs().write('config', 'x');
    const before = sim.requestCounts();
    const version = await vfs().stat('config');
    assert.match(version!, /^"[0-9a-f]{32}"$/);
    const after = sim.requestCounts();
    assert.equal((after['HeadObject'] ?? 0) - (before['HeadObject'] ?? 0), 1);
    assert.equal(after['GetObject'], before['GetObject']);
  });

  test('keys live under the URL prefix in the bucket', async () => {
    await vfs('s3://state/deep/prefix/').write('instancegroup/a', 'a');
    assert.equal(sim.getObject('state', 'deep/prefix/instancegroup/a')?.toString(), 'a');
    await vfs('s3://state').write('at-root', 'r');
    assert.equal(sim.getObject('state', 'at-root')?.toString(), 'r');
  });

  test('lists past one page of results', async () => {
    for (let i = 0; i < 1005; i++)
      sim.putObject('state', `paged/pki/issued/${String(i).padStart(4, '0')}`, 'x');
    const keys = await vfs('s3://state/paged').list('pki/issued/');
    assert.equal(keys.length, 1005);
    assert.equal(keys[1004], 'pki/issued/1004');
  });

  test('a wrong secret or unknown key is an authentication error', async () => {
    const wrongSecret = {
      ...options,
      credentials: { ...sim.credentials, secretAccessKey: 'not-the-secret' },
    };
    await assert.rejects(vfs('s3://state/c1', wrongSecret).read('config'), UnauthenticatedError);
    const unknownKey = { ...options, credentials: { accessKeyId: 'AKIAUNKNOWN', secretAccessKey: 'x' } };
    await assert.rejects(vfs('s3://state/c1', unknownKey).read('config'), UnauthenticatedError);
    // HEAD errors have no body, so (as with real S3) a bad key on stat is only a 403.
    await assert.rejects(
      vfs('s3://state/c1', unknownKey).stat('config'),
      (err: unknown) => err instanceof ForbiddenError && /access denied \(HTTP 403\)/.test(err.message),
    );
  });

  test('a missing bucket is NotFound and says so', async () => {
    await assert.rejects(
      vfs('s3://no-such-bucket/c1').read('config'),
      (err: unknown) =>
        err instanceof NotFoundError && /bucket no-such-bucket does not exist/.test(err.message),
    );
    await assert.rejects(vfs('s3://no-such-bucket/c1').list(''), NotFoundError);
  });

  test('an outage that outlasts the SDK retries is Unavailable (retryable)', async () => {
    sim.failNext(3);
    await assert.rejects(vfs().read('config'), UnavailableError);
    assert.equal((await vfs().read('config')).data.toString(), 'x');
  });

  test('an unreachable endpoint is Unavailable', async () => {
    await assert.rejects(
      vfs('s3://state/c1', { ...options, endpoint: 'http://127.0.0.1:9' }).read('config'),
      UnavailableError,
    );
  });

  test('anonymous access to a signed store is refused', async () => {
    const response = await fetch(`${sim.endpoint}/state/c1/config`);
    assert.equal(response.status, 403);
    assert.match(await response.text(), /<Code>AccessDenied<\/Code>/);
  });
});

describe('S3 endpoint that accepts the connection and never answers', () => {
  test('a read or a stat ends at the deadline as a timeout (retryable), its connections closed', async () => {
    const silent = await silentServer();
    const store = vfs('s3://state/c1', {
      endpoint: silent.endpoint,
      region: 'us-test-1',
      credentials: { accessKeyId: 'a', secretAccessKey: 'b' },
      timeoutMs: 300,
    });
    try {
      for (const [what, work] of [
        ['read', () => store.read('igconfig/node/nodes/nodeupconfig.yaml')],
        ['stat', () => store.stat('metal/inventory.yaml')],
      ] as const) {
        const started = Date.now();
        const outcome = await outcomeWithin<unknown>(work(), 5_000);
        assert.ok(!outcome.pending, `the ${what} was still pending 5 s after its 300 ms deadline`);
        assert.ok(Date.now() - started < 2_000, `${what} answered after ${Date.now() - started} ms`);
        const { error } = outcome;
        assert.ok(error instanceof KopsError, String(error));
        assert.equal(error.kind, 'timeout', error.message);
        assert.match(error.message, new RegExp(`cannot ${what} s3://state/c1/.*no answer within 300 ms`));
      }
      const deadline = Date.now() + 2_000;
      while (silent.open() > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      assert.equal(silent.open(), 0, 'an abandoned request still holds its connection');
    } finally {
      silent.close();
    }
  });
});
