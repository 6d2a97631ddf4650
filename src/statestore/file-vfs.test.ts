import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { ConfigError, NotFoundError } from '../errors.ts';
import { FileVfs } from './file-vfs.ts';

const dir = await mkdtemp(join(tmpdir(), 'kc-file-vfs-'));
after(() => rm(dir, { recursive: true, force: true }));

test('writes files with the requested mode, creating directories', async () => {
  const vfs = new FileVfs(dir);
  await vfs.write('pki/private/ca/keyset.yaml', 'secret', { mode: 0o600 });
  await vfs.write('config', 'public');
  assert.equal((await stat(join(dir, 'pki/private/ca/keyset.yaml'))).mode & 0o777, 0o600);
  assert.equal((await stat(join(dir, 'config'))).mode & 0o777, 0o644);
});

test('writes leave no temporary files behind and replace atomically', async () => {
  const vfs = new FileVfs(join(dir, 'atomic'));
  await Promise.all(Array.from({ length: 20 }, (_, i) => vfs.write('obj', `version-${i}`)));
  assert.deepEqual(await readdir(join(dir, 'atomic')), ['obj']);
  assert.match((await vfs.read('obj')).data.toString(), /^version-\d+$/);
});

test('an in-place edit by another program changes the version', async () => {
  const vfs = new FileVfs(join(dir, 'edit'));
  await vfs.write('ig', 'a');
  const before = await vfs.stat('ig');
  await writeFile(join(dir, 'edit', 'ig'), 'bb');
  assert.notEqual(await vfs.stat('ig'), before);
});

test('a directory is not an object, and listing a missing directory is empty', async () => {
  const vfs = new FileVfs(dir);
  assert.equal(await vfs.stat('pki'), undefined);
  await assert.rejects(vfs.read('pki'), NotFoundError);
  assert.deepEqual(await vfs.list('no-such-dir/'), []);
  assert.deepEqual(await vfs.list('pki/'), ['pki/private/ca/keyset.yaml']);
});

test('the root URL is a proper file URL that opens the same directory again', async () => {
  const odd = join(dir, 'a dir with #hash and %percent');
  const vfs = new FileVfs(odd);
  await vfs.write('config', 'odd');
  assert.equal(vfs.url, pathToFileURL(odd).href);
  assert.equal((await new FileVfs(fileURLToPath(vfs.url)).read('config')).data.toString(), 'odd');
});

test('a folder that is a file, or cannot be created, is a configuration error naming the object', async () => {
  const file = join(dir, 'a-regular-file');
  await writeFile(file, 'x');
  await assert.rejects(new FileVfs(file).write('pki/ca.crt', 'c'), (err) => {
    assert.ok(err instanceof ConfigError, String(err));
    assert.equal(
      err.message,
      `cannot write ${pathToFileURL(file).href}/pki/ca.crt: a parent is not a directory`,
    );
    return true;
  });
  await assert.rejects(new FileVfs(file).write('ca.crt', 'c'), (err) => {
    assert.ok(err instanceof ConfigError, String(err));
    assert.equal(err.message, `cannot write ${pathToFileURL(file).href}/ca.crt: a parent is not a directory`);
    return true;
  });
  await assert.rejects(new FileVfs('/proc/kops-controller-test').write('ca.crt', 'c'), (err) => {
    assert.ok(err instanceof ConfigError, String(err));
    assert.equal(
      err.message,
      'cannot write file:///proc/kops-controller-test/ca.crt: its directory cannot be created',
    );
    return true;
  });
});
