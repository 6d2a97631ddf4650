import assert from 'node:assert/strict';
import { createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, describe, test } from 'node:test';
import { ConfigError, NotFoundError, UnauthenticatedError, UnavailableError } from '../errors.ts';
import { startS3Sim } from '../sim/s3/server.ts';
import { openVfs, supportedSchemes, vfsOptionsFromEnv } from './open.ts';
import { S3Vfs } from './s3-vfs.ts';

const sim = await startS3Sim({ buckets: ['state'] });

/**
 * A pass-through in front of the simulator that records each request's headers: the Host header is
 * forwarded unchanged, so the SigV4 signature (which covers it) still verifies.
 */
const seen: { method: string; url: string; headers: Record<string, unknown> }[] = [];
const recorder = createServer((req, res) => {
  seen.push({ method: req.method ?? '', url: req.url ?? '', headers: { ...req.headers } });
  const target = new URL(sim.endpoint);
  const upstream = request(
    { host: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers },
    (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    },
  );
  req.pipe(upstream);
});
await new Promise<void>((resolve) => recorder.listen(0, '127.0.0.1', resolve));
const recorderEndpoint = `http://127.0.0.1:${(recorder.address() as AddressInfo).port}`;

after(async () => {
  recorder.closeAllConnections();
  await Promise.all([sim.close(), new Promise((resolve) => recorder.close(resolve))]);
});

/** The environment kops' guides have operators set for these stores. */
const env = (over: Record<string, string | undefined> = {}): NodeJS.ProcessEnv => ({
  S3_ENDPOINT: sim.endpoint,
  S3_ACCESS_KEY_ID: sim.credentials.accessKeyId,
  S3_SECRET_ACCESS_KEY: sim.credentials.secretAccessKey,
  ...over,
});

const schemes = ['do', 'hos', 'linode', 'scw'] as const;

describe('S3-compatible schemes (kops: do://, hos://, linode://, scw://)', () => {
  test('are supported schemes', () => {
    for (const scheme of schemes) assert.ok(supportedSchemes.includes(scheme), scheme);
  });

  for (const scheme of schemes) {
    test(`${scheme}://: read, stat, list, write and delete through openVfs with the S3_* variables`, async () => {
      const vfs = openVfs(`${scheme}://state/${scheme}/cluster.example.com/`, { env: env() });
      assert.ok(vfs instanceof S3Vfs);
      assert.equal(vfs.url, `${scheme}://state/${scheme}/cluster.example.com`);
      await vfs.write('config', 'kind: Cluster\n');
      // Path-style, under the URL's prefix, in the bucket the URL names.
      assert.equal(
        sim.getObject('state', `${scheme}/cluster.example.com/config`)?.toString(),
        'kind: Cluster\n',
      );
      const first = await vfs.read('config');
      assert.equal(first.data.toString(), 'kind: Cluster\n');
      assert.equal(await vfs.stat('config'), first.version);
      await vfs.write('config', 'kind: Cluster\nspec: {}\n');
      assert.notEqual(await vfs.stat('config'), first.version, 'an edit changes the version');
      await vfs.write('instancegroup/nodes', 'n');
      assert.deepEqual(await vfs.list('instancegroup/'), ['instancegroup/nodes']);
      await vfs.delete('instancegroup/nodes');
      await vfs.delete('instancegroup/nodes');
      assert.equal(await vfs.stat('instancegroup/nodes'), undefined);
      await assert.rejects(vfs.read('instancegroup/nodes'), NotFoundError);
    });

    test(`${scheme}://: S3_ENDPOINT is required, as kops requires it`, () => {
      assert.throws(
        () => openVfs(`${scheme}://state/c1`, { env: env({ S3_ENDPOINT: undefined }) }),
        (err: unknown) =>
          err instanceof ConfigError &&
          /needs S3_ENDPOINT/.test(err.message) &&
          err.message.includes(`${scheme}://`),
      );
    });

    test(`${scheme}://: both S3 keys are required (kops: "cannot be empty when S3_ENDPOINT is not empty")`, () => {
      for (const name of ['S3_ACCESS_KEY_ID', 'S3_SECRET_ACCESS_KEY']) {
        assert.throws(
          () => openVfs(`${scheme}://state/c1`, { env: env({ [name]: undefined }) }),
          (err: unknown) => err instanceof ConfigError && err.message.includes(`${name} is not set`),
        );
      }
    });

    test(`${scheme}://: a URL without a bucket, or with a bad one, is refused`, () => {
      assert.throws(() => openVfs(`${scheme}://`, { env: env() }), ConfigError);
      assert.throws(() => openVfs(`${scheme}:///c1`, { env: env() }), ConfigError);
      assert.throws(() => openVfs(`${scheme}://Bad_Bucket!/c1`, { env: env() }), /is not a bucket name/);
    });
  }

  test('checksums follow kops: Linode only when required, the others the SDK default', async () => {
    const checksumHeaders = () =>
      seen
        .filter((r) => r.method === 'PUT')
        .flatMap((r) => Object.keys(r.headers).filter((h) => h.startsWith('x-amz-checksum-')));
    for (const scheme of schemes) {
      seen.length = 0;
      const vfs = openVfs(`${scheme}://state/checksums`, { env: env({ S3_ENDPOINT: recorderEndpoint }) });
      await vfs.write('config', 'x');
      assert.equal((await vfs.read('config')).data.toString(), 'x');
      if (scheme === 'linode') assert.deepEqual(checksumHeaders(), [], 'Linode sends no flexible checksum');
      else assert.ok(checksumHeaders().length > 0, `${scheme} sends the SDK's default checksum`);
    }
  });

  test('the region is S3_REGION, else us-east-1, never AWS_REGION (as kops with S3_ENDPOINT)', async () => {
    const scopeOf = () =>
      /Credential=[^/]+\/\d+\/([^/]+)\/s3\//.exec(String(seen.at(-1)?.headers['authorization']))?.[1];
    seen.length = 0;
    await openVfs('do://state/region', {
      env: env({ S3_ENDPOINT: recorderEndpoint, AWS_REGION: 'eu-west-3' }),
    }).stat('x');
    assert.equal(scopeOf(), 'us-east-1');
    await openVfs('scw://state/region', {
      env: env({ S3_ENDPOINT: recorderEndpoint, S3_REGION: 'fr-par', AWS_REGION: 'eu-west-3' }),
    }).stat('x');
    assert.equal(scopeOf(), 'fr-par');
  });

  test('an S3_ENDPOINT written without a scheme, as kops guides write it, means https', () => {
    assert.equal(
      vfsOptionsFromEnv({ S3_ENDPOINT: 'nyc3.digitaloceanspaces.com' }).s3.endpoint,
      'https://nyc3.digitaloceanspaces.com',
    );
    assert.equal(
      vfsOptionsFromEnv({ S3_ENDPOINT: 'http://127.0.0.1:9000' }).s3.endpoint,
      'http://127.0.0.1:9000',
    );
  });

  test('explicit options win over the environment', async () => {
    const vfs = openVfs('hos://state/explicit', {
      env: {},
      s3: { endpoint: sim.endpoint, credentials: sim.credentials },
    });
    await vfs.write('config', 'explicit');
    assert.equal(sim.getObject('state', 'explicit/config')?.toString(), 'explicit');
  });

  test('refused keys are an authentication error that names the S3_* variables', async () => {
    const vfs = openVfs('linode://state/c1', { env: env({ S3_SECRET_ACCESS_KEY: 'wrong' }) });
    await assert.rejects(
      vfs.read('config'),
      (err: unknown) =>
        err instanceof UnauthenticatedError && /S3_ACCESS_KEY_ID and S3_SECRET_ACCESS_KEY/.test(err.message),
    );
  });

  test('an outage that outlasts the SDK retries is Unavailable, as for s3://; a shorter one is retried', async () => {
    const vfs = openVfs('scw://state/outage', { env: env() });
    await vfs.write('config', 'x');
    sim.failNext(2);
    assert.equal((await vfs.read('config')).data.toString(), 'x');
    sim.failNext(3);
    await assert.rejects(vfs.read('config'), UnavailableError);
    assert.equal((await vfs.read('config')).data.toString(), 'x');
  });
});
