import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { parse } from 'yaml';
import { ConflictError, NotFoundError } from '../errors.ts';
import { openVfs } from '../statestore/open.ts';
import { createCa, rotateCa } from './ca.ts';
import {
  caLayoutOf,
  caPemPaths,
  keypairIdsPath,
  loadCa,
  locationOf,
  nodeFilePath,
  readText,
  saveNewCa,
} from './folder.ts';
import { keysetPath } from './keyset.ts';

const local = mkdtempSync(join(tmpdir(), 'kops-pki-folder-'));
after(() => rmSync(local, { recursive: true, force: true }));
let stores = 0;
const memfs = () => openVfs(`memfs://pki-folder-test/${stores++}`);

test('the PEM layout is kops-controller caBasePath: <name>.crt, <name>.key, keypair-ids.yaml', async () => {
  const vfs = memfs();
  const ca = rotateCa(createCa());
  const saved = await saveNewCa(vfs, ca, 'pem');
  assert.deepEqual(saved, {
    certificate: `${vfs.url}/kubernetes-ca.crt`,
    key: `${vfs.url}/kubernetes-ca.key`,
  });
  assert.deepEqual(caPemPaths('kubernetes-ca'), {
    certificate: 'kubernetes-ca.crt',
    key: 'kubernetes-ca.key',
  });
  assert.deepEqual(parse((await readText(vfs, keypairIdsPath)) ?? ''), {
    'kubernetes-ca': ca.signer.certificate.keypairId,
  });
  const loaded = await loadCa(vfs, 'kubernetes-ca');
  assert.equal(loaded.signer.certificate.keypairId, ca.signer.certificate.keypairId);
  assert.deepEqual(
    loaded.certificates.map((c) => c.pem),
    ca.certificates.map((c) => c.pem),
  );
});

test('keypair ids of other CAs in keypair-ids.yaml are kept', async () => {
  const vfs = memfs();
  await vfs.write(keypairIdsPath, 'etcd-clients-ca-cilium: "42"\n');
  const ca = createCa();
  await saveNewCa(vfs, ca, 'pem');
  assert.deepEqual(parse((await readText(vfs, keypairIdsPath)) ?? ''), {
    'etcd-clients-ca-cilium': '42',
    'kubernetes-ca': ca.signer.certificate.keypairId,
  });
});

test('the keyset layout writes and reads pki/private/<name>/keyset.yaml', async () => {
  const vfs = memfs();
  const ca = createCa({ name: 'etcd-clients-ca' });
  const saved = await saveNewCa(vfs, ca, 'keyset');
  assert.equal(saved.key, `${vfs.url}/${keysetPath('etcd-clients-ca')}`);
  assert.equal(await caLayoutOf(vfs, 'etcd-clients-ca'), 'keyset');
  assert.equal(await caLayoutOf(vfs, 'kubernetes-ca'), undefined);
  const loaded = await loadCa(vfs, 'etcd-clients-ca');
  assert.equal(loaded.name, 'etcd-clients-ca');
  assert.equal(loaded.signer.certificate.pem, ca.signer.certificate.pem);
});

test('an existing CA is never replaced, in either layout', async () => {
  const vfs = memfs();
  await saveNewCa(vfs, createCa(), 'keyset');
  await assert.rejects(saveNewCa(vfs, createCa(), 'pem'), ConflictError);
  await assert.rejects(saveNewCa(vfs, createCa(), 'keyset'), ConflictError);
});

test('a missing CA, or a key without its certificate, is a not-found error that says what to do', async () => {
  const vfs = memfs();
  await assert.rejects(
    loadCa(vfs, 'kubernetes-ca'),
    (err: Error) => err instanceof NotFoundError && /run "kops-controller pki init" first/.test(err.message),
  );
  await vfs.write('kubernetes-ca.key', 'x');
  await assert.rejects(
    loadCa(vfs, 'kubernetes-ca'),
    /kubernetes-ca\.crt is missing although the CA key exists/,
  );
});

test('locations are file paths for local folders and URLs elsewhere', () => {
  assert.equal(
    locationOf(openVfs(local), nodeFilePath('node-a', 'kubelet.crt')),
    join(local, 'nodes/node-a/kubelet.crt'),
  );
  assert.equal(locationOf(openVfs('memfs://x/y'), 'kubernetes-ca.crt'), 'memfs://x/y/kubernetes-ca.crt');
});
