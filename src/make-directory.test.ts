import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { makeDirectory } from './make-directory.ts';

const root = mkdtempSync(join(tmpdir(), 'kops-make-directory-'));
after(() => rmSync(root, { recursive: true, force: true }));

test('creates missing parents with the mode, and an existing directory is success', async () => {
  const dir = join(root, 'a', 'b', 'c');
  await makeDirectory(dir, 0o700);
  assert.ok(statSync(dir).isDirectory());
  assert.equal(statSync(join(root, 'a')).mode & 0o777, 0o700);
  await makeDirectory(dir, 0o700);
});

test('a file in the way is an error', async () => {
  writeFileSync(join(root, 'file'), '');
  await assert.rejects(makeDirectory(join(root, 'file')), { code: 'EEXIST' });
  await assert.rejects(makeDirectory(join(root, 'file', 'below')), { code: 'ENOTDIR' });
});

// Node's own recursive mkdir never settles here (it loops between /proc and the new name).
test('a new name under /proc fails with ENOENT instead of spinning', async () => {
  await assert.rejects(makeDirectory('/proc/kops-controller-test/state', 0o700), { code: 'ENOENT' });
});
