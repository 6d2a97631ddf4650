import assert from 'node:assert/strict';
import { test } from 'node:test';
import { InvalidInputError } from '../errors.ts';
import { MemfsVfs } from './memfs-vfs.ts';
import { findSecret, nodeSecretsReader } from './secrets.ts';

test("kops' secret files: Data is base64 (any case of the field name, as Go decodes); absent or null is no secret", async () => {
  const store = new MemfsVfs(new URL(`memfs://secrets-unit-${process.pid}/c/secrets`));
  await store.write('upper', '{"Data":"aGVsbG8="}');
  await store.write('lower', '{"data":"aGVsbG8="}');
  await store.write('null', '{"Data":null}');
  assert.equal((await findSecret(store, 'upper'))?.toString(), 'hello');
  assert.equal((await findSecret(store, 'lower'))?.toString(), 'hello');
  assert.equal(await findSecret(store, 'null'), undefined);
  assert.equal(await findSecret(store, 'missing'), undefined);
  await store.write('bad', '{"Data":"not base64!"}');
  await assert.rejects(
    findSecret(store, 'bad'),
    (err) => err instanceof InvalidInputError && /Data must be base64/.test(err.message),
  );
});

test('only dockerconfig is given to nodes, whatever else the store holds', async () => {
  const store = new MemfsVfs(new URL(`memfs://secrets-unit-${process.pid}/d/secrets`));
  await store.write('dockerconfig', '{"Data":"e30="}');
  await store.write('kube', '{"Data":"c2VjcmV0"}');
  assert.deepEqual(await nodeSecretsReader(store)(), { dockerconfig: 'e30=' });
});
