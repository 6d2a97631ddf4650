import assert from 'node:assert/strict';
import { test } from 'node:test';
import { clearMemfs, MemfsVfs } from './memfs-vfs.ts';

test('stores opened on the same authority share objects; other authorities do not', async () => {
  const writer = new MemfsVfs(new URL('memfs://shared-a/clusters'));
  await writer.write('c1/config', 'x');
  assert.equal(
    (await new MemfsVfs(new URL('memfs://shared-a/clusters/c1')).read('config')).data.toString(),
    'x',
  );
  assert.equal(await new MemfsVfs(new URL('memfs://shared-b/clusters')).stat('c1/config'), undefined);
});

test('a store rooted at a prefix lists only its own objects', async () => {
  const root = new MemfsVfs(new URL('memfs://prefixes'));
  await root.write('c1/config', '1');
  await root.write('c10/config', '10');
  assert.deepEqual(await new MemfsVfs(new URL('memfs://prefixes/c1')).list(''), ['config']);
});

test('reads return copies, so callers cannot change the stored object', async () => {
  const vfs = new MemfsVfs(new URL('memfs://copies'));
  await vfs.write('k', 'abc');
  (await vfs.read('k')).data.fill(0);
  assert.equal((await vfs.read('k')).data.toString(), 'abc');
});

test('clearMemfs empties an authority', async () => {
  const vfs = new MemfsVfs(new URL('memfs://to-clear'));
  await vfs.write('k', 'v');
  clearMemfs('to-clear');
  assert.equal(await new MemfsVfs(new URL('memfs://to-clear')).stat('k'), undefined);
});
