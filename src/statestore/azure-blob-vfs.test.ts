import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { CredentialUnavailableError, type TokenCredential } from '@azure/identity';
import {
  ConfigError,
  ForbiddenError,
  KopsError,
  NotFoundError,
  UnauthenticatedError,
  UnavailableError,
} from '../errors.ts';
import { startBlobStorageSimulator } from '../sim/azure/blob.ts';
import { startAzureSimulator } from '../sim/azure/simulator.ts';
import { AzureBlobVfs, azureBlobEndpointVariable } from './azure-blob-vfs.ts';
import { openVfs } from './open.ts';

const azure = await startAzureSimulator();
const blob = await startBlobStorageSimulator({ validToken: (token) => azure.validToken(token) });
blob.createContainer('kopsstate', 'state');
after(() => Promise.all([azure.close(), blob.close()]));

const env = { [azureBlobEndpointVariable]: blob.endpoint };
const open = (
  url = 'azureblob://kopsstate/state/cluster.example.com',
  options: { credential?: TokenCredential; timeoutMs?: number; pageSize?: number } = {},
) => openVfs(url, { env, azureBlob: { credential: azure.credential, caPem: blob.caPem, ...options } });

describe('Azure Blob backend (azureblob://account/container/path)', () => {
  test('opens through openVfs with a managed-identity token; the version is the ETag, polling one Get Blob Properties (the VFS contract: open.test.ts)', async () => {
    const vfs = open('azureblob://kopsstate/state/cluster.example.com/');
    assert.ok(vfs instanceof AzureBlobVfs);
    assert.equal(vfs.url, 'azureblob://kopsstate/state/cluster.example.com');
    await vfs.write('config', 'kind: Cluster\n');
    assert.equal(
      blob.getBlob('kopsstate', 'state', 'cluster.example.com/config')?.toString(),
      'kind: Cluster\n',
    );
    const first = await vfs.read('config');
    assert.equal(first.data.toString(), 'kind: Cluster\n');
    assert.match(first.version, /^"0x8D[0-9A-F]+"$/, 'the version is the ETag');
    blob.clearCalls();
    assert.equal(await vfs.stat('config'), first.version);
    assert.equal(blob.count('blob.properties'), 1, 'polling is one Get Blob Properties');
  });

  test('blob names with spaces and other characters round-trip', async () => {
    const vfs = open('azureblob://kopsstate/state/odd names');
    await vfs.write('pki/a b+c%d&e', 'odd');
    assert.equal(blob.getBlob('kopsstate', 'state', 'odd names/pki/a b+c%d&e')?.toString(), 'odd');
    assert.deepEqual(await vfs.list('pki/'), ['pki/a b+c%d&e']);
  });

  test('lists past one page, paged by NextMarker', async () => {
    for (let i = 0; i < 25; i++)
      blob.putBlob('kopsstate', 'state', `paged/issued/${String(i).padStart(2, '0')}`, 'x');
    const vfs = open('azureblob://kopsstate/state/paged', { pageSize: 10 });
    blob.clearCalls();
    const names = await vfs.list('issued/');
    assert.equal(names.length, 25);
    assert.equal(names[24], 'issued/24');
    assert.equal(blob.count('blob.list'), 3);
  });

  test('a missing container is NotFound, on stat too', async () => {
    const vfs = open('azureblob://kopsstate/missing/c1');
    await assert.rejects(vfs.read('config'), /container missing does not exist in storage account kopsstate/);
    await assert.rejects(vfs.stat('config'), NotFoundError);
    await assert.rejects(vfs.list(''), NotFoundError);
  });

  test('500 and 503 are retried by the SDK, then Unavailable (as the S3 backend)', async () => {
    const vfs = open();
    await vfs.write('retry', 'r');
    blob.failNext(2, 503, 'blob.get');
    assert.equal((await vfs.read('retry')).data.toString(), 'r');
    blob.failNext(3, 503, 'blob.get');
    await assert.rejects(
      vfs.read('retry'),
      (err: unknown) => err instanceof UnavailableError && /ServerBusy/.test(err.message),
    );
    blob.failNext(3, 500, 'blob.properties');
    await assert.rejects(vfs.stat('retry'), UnavailableError);
    blob.failNext(1, 429, 'blob.list');
    await assert.rejects(vfs.list(''), UnavailableError);
    blob.dropNext(1, 'blob.put');
    await vfs.write('retry', 'after a dropped connection');
    assert.equal((await vfs.read('retry')).data.toString(), 'after a dropped connection');
  });

  test('a 403 says which role to grant', async () => {
    blob.failNext(1, 403, 'blob.get');
    await assert.rejects(
      open().read('config'),
      (err: unknown) => err instanceof ForbiddenError && /Storage Blob Data Reader/.test(err.message),
    );
  });

  test('a store that does not answer is a timeout within the deadline', async () => {
    const vfs = open(undefined, { timeoutMs: 300 });
    await vfs.write('slow', 's');
    blob.delayNext(1, 2_000, 'blob.get');
    const started = Date.now();
    await assert.rejects(
      vfs.read('slow'),
      (err: unknown) => err instanceof KopsError && err.kind === 'timeout',
    );
    assert.ok(Date.now() - started < 1_500);
    blob.resetFaults();
  });

  test('DefaultAzureCredential, narrowed to managed identity at the simulated IMDS, as the dev environment sets it', async () => {
    const variables = {
      AZURE_TOKEN_CREDENTIALS: 'ManagedIdentityCredential',
      AZURE_POD_IDENTITY_AUTHORITY_HOST: azure.imdsEndpoint,
      IDENTITY_ENDPOINT: '',
      MSI_ENDPOINT: '',
      AZURE_FEDERATED_TOKEN_FILE: '',
      AZURE_CLIENT_ID: '',
    };
    const saved = Object.fromEntries(Object.keys(variables).map((k) => [k, process.env[k]]));
    Object.assign(process.env, variables);
    try {
      const vfs = openVfs('azureblob://kopsstate/state/managed-identity', {
        env,
        azureBlob: { caPem: blob.caPem },
      });
      await vfs.write('config', 'via managed identity');
      assert.equal((await vfs.read('config')).data.toString(), 'via managed identity');
    } finally {
      for (const [k, v] of Object.entries(saved)) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
  });
});

describe('Azure Blob: what is refused, and how it is said', () => {
  test('AZURE_STORAGE_ACCOUNT set is refused, as kops refuses it', () => {
    assert.throws(
      () =>
        openVfs('azureblob://kopsstate/state/c1', { env: { ...env, AZURE_STORAGE_ACCOUNT: 'kopsstate' } }),
      (err: unknown) =>
        err instanceof ConfigError &&
        /unset AZURE_STORAGE_ACCOUNT/.test(err.message) &&
        err.message.includes('azureblob://<account>/<container>/<key>'),
    );
  });

  test('a URL without account or container, or with malformed ones, is refused', () => {
    for (const [url, message] of [
      ['azureblob://', /no storage account/],
      ['azureblob:///state/c1', /no storage account/],
      ['azureblob://kopsstate', /no container/],
      ['azureblob://kopsstate/', /no container/],
      ['azureblob://Kops_State/state', /is not a storage account name/],
      ['azureblob://kopsstate/Bad--Container/x', /is not a container name/],
    ] as const) {
      assert.throws(
        () => openVfs(url, { env }),
        (err: unknown) => err instanceof ConfigError && message.test(err.message),
        url,
      );
    }
  });

  test('the endpoint override must be https', () => {
    assert.throws(
      () =>
        openVfs('azureblob://kopsstate/state', {
          env: { [azureBlobEndpointVariable]: 'http://127.0.0.1:1' },
        }),
      /must be an https:\/\/ URL/,
    );
  });

  test('a token the store does not accept is an authentication error', async () => {
    const forged: TokenCredential = {
      getToken: async () => ({ token: 'forged', expiresOnTimestamp: Date.now() + 3_600_000 }),
    };
    await assert.rejects(
      open(undefined, { credential: forged }).read('config'),
      (err: unknown) => err instanceof UnauthenticatedError && /InvalidAuthenticationInfo/.test(err.message),
    );
  });

  test('no credential available is an authentication error that says where credentials come from', async () => {
    const none: TokenCredential = {
      getToken: async () => {
        throw new CredentialUnavailableError('ManagedIdentityCredential: no managed identity endpoint');
      },
    };
    await assert.rejects(
      open(undefined, { credential: none }).read('config'),
      (err: unknown) => err instanceof UnauthenticatedError && /no valid Azure credentials/.test(err.message),
    );
  });
});
