import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { OAuth2Client } from 'google-auth-library';
import { ConfigError, InvalidInputError, NotFoundError } from '../errors.ts';
import { startBlobStorageSimulator } from '../sim/azure/blob.ts';
import { startAzureSimulator } from '../sim/azure/simulator.ts';
import { startGcsSim } from '../sim/gcs/server.ts';
import { startOpenStackSimulator } from '../sim/openstack/simulator.ts';
import { startS3Sim } from '../sim/s3/server.ts';
import { azureBlobEndpointVariable } from './azure-blob-vfs.ts';
import { FileVfs } from './file-vfs.ts';
import { GcsVfs } from './gcs-vfs.ts';
import { MemfsVfs } from './memfs-vfs.ts';
import { openVfs, vfsOptionsFromEnv } from './open.ts';
import { S3Vfs } from './s3-vfs.ts';
import type { Vfs } from './types.ts';

/** A GCS auth client holding a fixed, unexpired token: the real library, no network. */
function staticGoogleAuth(token: string): OAuth2Client {
  const client = new OAuth2Client();
  client.setCredentials({ access_token: token, expiry_date: Date.now() + 3_600_000 });
  return client;
}

const s3 = await startS3Sim({ buckets: ['state'] });
const gcs = await startGcsSim({ buckets: ['state'], token: 'sim-token' });
const openstack = await startOpenStackSimulator();
openstack.swift.createContainer('state');
const azure = await startAzureSimulator();
const blob = await startBlobStorageSimulator({ validToken: (token) => azure.validToken(token) });
blob.createContainer('kopsstate', 'state');
let tempDir = '';

const backends: { name: string; open: () => Vfs }[] = [
  { name: 'file', open: () => openVfs(`file://${tempDir}/store`) },
  { name: 'memfs', open: () => openVfs('memfs://contract/clusters/c1') },
  {
    name: 's3',
    open: () =>
      openVfs('s3://state/clusters/c1', {
        s3: { endpoint: s3.endpoint, region: 'us-test-1', credentials: s3.credentials },
      }),
  },
  {
    name: 'gs',
    open: () =>
      openVfs('gs://state/clusters/c1', {
        gcs: { endpoint: gcs.endpoint, auth: staticGoogleAuth('sim-token') },
      }),
  },
  // kops' S3-compatible schemes share one backend; Linode's is the one with other checksum settings.
  {
    name: 'linode',
    open: () =>
      openVfs('linode://state/clusters/c1', {
        env: {
          S3_ENDPOINT: s3.endpoint,
          S3_ACCESS_KEY_ID: s3.credentials.accessKeyId,
          S3_SECRET_ACCESS_KEY: s3.credentials.secretAccessKey,
        },
      }),
  },
  { name: 'swift', open: () => openVfs('swift://state/clusters/c1', { env: openstack.env }) },
  {
    name: 'azureblob',
    open: () =>
      openVfs('azureblob://kopsstate/state/clusters/c1', {
        env: { [azureBlobEndpointVariable]: blob.endpoint },
        azureBlob: { credential: azure.credential, caPem: blob.caPem },
      }),
  },
];

before(async () => {
  tempDir = await mkdtemp(join(tmpdir(), 'kc-vfs-'));
});
after(async () => {
  await Promise.all([
    s3.close(),
    gcs.close(),
    openstack.close(),
    azure.close(),
    blob.close(),
    rm(tempDir, { recursive: true, force: true }),
  ]);
});

for (const backend of backends) {
  describe(`${backend.name} backend`, () => {
    test('writes, reads back and versions an object', async () => {
      const vfs = backend.open();
      await vfs.write('config', 'kind: Cluster\n');
      const first = await vfs.read('config');
      assert.equal(first.data.toString(), 'kind: Cluster\n');
      assert.ok(first.version);
      assert.equal(await vfs.stat('config'), first.version);

      await vfs.write('config', 'kind: Cluster\nspec: {}\n');
      const second = await vfs.read('config');
      assert.equal(second.data.toString(), 'kind: Cluster\nspec: {}\n');
      assert.notEqual(second.version, first.version, 'an edit changes the version');
      assert.equal(await vfs.stat('config'), second.version);
    });

    test('a missing object is NotFound on read and undefined on stat', async () => {
      const vfs = backend.open();
      await assert.rejects(vfs.read('instancegroup/missing'), NotFoundError);
      assert.equal(await vfs.stat('instancegroup/missing'), undefined);
    });

    test('lists objects under a prefix, relative to the root and sorted', async () => {
      const vfs = backend.open();
      await vfs.write('instancegroup/nodes-b', 'b');
      await vfs.write('instancegroup/nodes-a', 'a');
      await vfs.write('pki/private/ca/keyset.yaml', 'k', { mode: 0o600 });
      assert.deepEqual(await vfs.list('instancegroup/'), ['instancegroup/nodes-a', 'instancegroup/nodes-b']);
      assert.deepEqual(await vfs.list('pki/'), ['pki/private/ca/keyset.yaml']);
      assert.deepEqual(await vfs.list('nothing-here/'), []);
      assert.ok((await vfs.list('')).includes('config'));
    });

    test('deletes objects, and deleting twice is fine', async () => {
      const vfs = backend.open();
      await vfs.write('instancegroup/doomed', 'x');
      await vfs.delete('instancegroup/doomed');
      await vfs.delete('instancegroup/doomed');
      assert.equal(await vfs.stat('instancegroup/doomed'), undefined);
    });

    test('paths that would leave the root are refused', async () => {
      const vfs = backend.open();
      for (const bad of ['../config', '/etc/passwd', 'a//b', 'instancegroup/./x', '']) {
        await assert.rejects(vfs.read(bad), InvalidInputError, bad);
      }
      await assert.rejects(vfs.write('../escape', 'x'), InvalidInputError);
      await assert.rejects(vfs.list('../'), InvalidInputError);
    });

    test('binary data round-trips byte for byte', async () => {
      const vfs = backend.open();
      const bytes = Buffer.from([0, 255, 1, 254, 10, 13]);
      await vfs.write('secrets/blob', bytes);
      assert.deepEqual((await vfs.read('secrets/blob')).data, bytes);
    });
  });
}

describe('openVfs', () => {
  test('picks the backend by scheme and keeps the root URL', () => {
    assert.ok(openVfs('memfs://tests/minimal.example.com') instanceof MemfsVfs);
    assert.ok(openVfs('file:///srv/state') instanceof FileVfs);
    assert.ok(openVfs('./relative/dir') instanceof FileVfs);
    assert.ok(openVfs('/srv/state') instanceof FileVfs);
    assert.ok(openVfs('s3://bucket/prefix', { s3: { region: 'us-east-1' } }) instanceof S3Vfs);
    assert.ok(openVfs('gs://bucket/prefix', { gcs: { auth: staticGoogleAuth('x') } }) instanceof GcsVfs);
    assert.equal(openVfs('s3://bucket/a/b/', { s3: { region: 'us-east-1' } }).url, 's3://bucket/a/b');
    assert.equal(openVfs('/srv/state/').url, 'file:///srv/state');
  });

  test('unknown schemes and malformed URLs are configuration errors that say what to use', () => {
    assert.throws(
      () => openVfs('k8s://secrets/x'),
      /scheme must be one of file:\/\/, s3:\/\/, gs:\/\/, memfs:\/\/, do:\/\/, hos:\/\/, linode:\/\/, scw:\/\/, swift:\/\/, azureblob:\/\//,
    );
    assert.throws(() => openVfs('s3://'), ConfigError);
    assert.throws(() => openVfs('s3://Bad_Bucket!/x'), /is not a bucket name/);
    assert.throws(() => openVfs('gs:///nobucket'), ConfigError);
    assert.throws(() => openVfs('memfs:///x'), /memfs:\/\/NAME\/PATH/);
    assert.throws(() => openVfs('file://host/dir'), /three slashes/);
    assert.throws(() => openVfs('s3://bucket/x?versionId=1'), /query strings/);
    assert.throws(() => openVfs(''), /empty/);
  });
});

describe('environment defaults', () => {
  test('kops S3_* variables point the S3 backend at an S3-compatible store', async () => {
    const env = {
      S3_ENDPOINT: s3.endpoint,
      S3_REGION: 'us-test-1',
      S3_ACCESS_KEY_ID: s3.credentials.accessKeyId,
      S3_SECRET_ACCESS_KEY: s3.credentials.secretAccessKey,
    };
    assert.deepEqual(vfsOptionsFromEnv(env).s3, {
      endpoint: s3.endpoint,
      region: 'us-test-1',
      credentials: { accessKeyId: env.S3_ACCESS_KEY_ID, secretAccessKey: env.S3_SECRET_ACCESS_KEY },
    });
    const vfs = openVfs('s3://state/from-env', { env });
    await vfs.write('config', 'via env');
    assert.equal(s3.getObject('state', 'from-env/config')?.toString(), 'via env');
  });

  test('STORAGE_EMULATOR_HOST points the GCS backend at an emulator; explicit options still win', async () => {
    assert.equal(
      vfsOptionsFromEnv({ STORAGE_EMULATOR_HOST: 'localhost:4443' }).gcs.endpoint,
      'http://localhost:4443',
    );
    const env = { STORAGE_EMULATOR_HOST: 'http://127.0.0.1:9' };
    const vfs = openVfs('gs://state/from-env', {
      env,
      gcs: { endpoint: gcs.endpoint, auth: staticGoogleAuth('sim-token') },
    });
    await vfs.write('config', 'explicit');
    assert.equal(gcs.getObject('state', 'from-env/config')?.toString(), 'explicit');
    assert.deepEqual(vfsOptionsFromEnv({}), { s3: {}, gcs: {} });
  });
});
