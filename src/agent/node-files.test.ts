/**
 * The node files are published as a set: a process killed at any moment of a replacement leaves
 * `--dir` showing the whole previous set or the whole new one, never a new key beside an old
 * certificate; the next write finishes cleanly and leaves nothing behind.
 */
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { lstat, mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { ConfigError } from '../errors.ts';
import {
  type NodeFile,
  type NodeFileContent,
  nodeFileNames,
  nodeFilePath,
  writeNodeFiles,
} from './node-files.ts';

let root = '';
before(async () => {
  root = await mkdtemp(join(tmpdir(), 'kops-node-files-'));
});
after(() => rm(root, { recursive: true, force: true }));

const modes: Record<NodeFile, number> = {
  clientKey: 0o600,
  clientCertificate: 0o644,
  serverKey: 0o600,
  serverCertificate: 0o644,
  caBundle: 0o644,
  kubeconfig: 0o600,
};

/** The full set of a join, every file tagged with `tag`, the kubeconfig last as join writes it. */
function fileSet(tag: string, files: NodeFile[] = Object.keys(modes) as NodeFile[]): NodeFileContent[] {
  return files.map((file) => ({ file, data: `${tag} ${nodeFileNames[file]}\n`, mode: modes[file] }));
}

/** The tag of every node file `dir` shows (through its links), by name. */
async function visibleTags(dir: string): Promise<Map<string, string>> {
  const tags = new Map<string, string>();
  for (const name of Object.values(nodeFileNames)) {
    try {
      tags.set(name, (await readFile(join(dir, name), 'utf8')).split(' ')[0] as string);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }
  return tags;
}

/** Runs a process that replaces the set in `dir` over and over (tagged 1, 2, 3, …) and kills it after `killAfterMs`. */
async function killMidWrite(dir: string, killAfterMs: number): Promise<void> {
  const moduleUrl = new URL('./node-files.ts', import.meta.url).href;
  const script = `
    import { writeNodeFiles, nodeFileNames } from ${JSON.stringify(moduleUrl)};
    const modes = ${JSON.stringify(modes)};
    const set = (tag) => Object.keys(modes).map((file) => ({ file, data: tag + ' ' + nodeFileNames[file] + '\\n', mode: modes[file] }));
    process.stdout.write('ready\\n');
    for (let i = 1; ; i++) await writeNodeFiles(${JSON.stringify(dir)}, set(String(i)));
  `;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise((resolve) => child.on('exit', resolve));
  await new Promise<void>((resolve) => child.stdout.once('data', () => resolve()));
  await new Promise((resolve) => setTimeout(resolve, killAfterMs));
  child.kill('SIGKILL');
  await exited;
}

describe('node files: one set at a time', () => {
  test('a process killed at any moment of a replacement leaves the old set or the new one; the next write cleans up', async () => {
    for (let i = 0; i < 12; i++) {
      const dir = join(root, `crash-${i}`);
      await mkdir(dir, { mode: 0o700 });
      // As an earlier join left it: plain files, tagged 0.
      for (const { file, data, mode } of fileSet('0'))
        await writeFile(nodeFilePath(dir, file), data, { mode });
      await killMidWrite(dir, 5 + i * 7);
      const visible = await visibleTags(dir);
      assert.equal(visible.size, 6, 'every file is there');
      // The linked files are one set; the kubeconfig, renamed into place after them, is that set's or
      // the one before (it embeds its own credentials, so either is whole), never a newer one.
      const kubeconfig = Number(visible.get(nodeFileNames.kubeconfig));
      visible.delete(nodeFileNames.kubeconfig);
      const tags = new Set(visible.values());
      assert.equal(tags.size, 1, `killed after ${5 + i * 7} ms, ${dir} shows a mix: ${[...tags].join(', ')}`);
      const set = Number([...tags][0]);
      assert.ok(kubeconfig === set || kubeconfig === set - 1, `kubeconfig ${kubeconfig} beside set ${set}`);

      assert.deepEqual(
        await writeNodeFiles(dir, fileSet('C')),
        fileSet('C').map(({ file }) => nodeFilePath(dir, file)),
      );
      assert.deepEqual([...new Set((await visibleTags(dir)).values())], ['C']);
      const hidden = (await readdir(dir)).filter((name) => name.startsWith('..'));
      assert.equal(hidden.length, 2, `only ..data and the current version remain: ${hidden.join(', ')}`);
    }
  });

  test('the first set in an empty directory: each file with its mode and content', async () => {
    const dir = join(root, 'first');
    await mkdir(dir, { mode: 0o700 });
    await writeNodeFiles(dir, fileSet('A'));
    for (const [file, mode] of Object.entries(modes) as [NodeFile, number][]) {
      assert.equal((await stat(nodeFilePath(dir, file))).mode & 0o777, mode, file);
      assert.equal(await readFile(nodeFilePath(dir, file), 'utf8'), `A ${nodeFileNames[file]}\n`);
    }
  });

  test('the kubeconfig is a regular 0600 file, as a CIS scanner reads it (stat without following links)', async () => {
    // kube-bench cfg/cis-1.10/node.yaml, 4.1.5 and 4.1.6 (Automated): `stat -c permissions=%a
    // $kubeletkubeconfig` must be 600 or less, `stat -c %U:%G` root:root. GNU stat reports a symbolic
    // link's own mode (777), not its target's; so it reads the kubeconfig as the scanner does.
    const dir = join(root, 'cis');
    await mkdir(dir, { mode: 0o700 });
    const statOf = async (path: string) =>
      (
        await promisify(execFile)('stat', ['-c', 'permissions=%a %F', path], { encoding: 'utf8' })
      ).stdout.trim();
    await writeNodeFiles(dir, fileSet('A'));
    assert.equal(await statOf(nodeFilePath(dir, 'kubeconfig')), 'permissions=600 regular file');
    // And after a replacement over the regular file.
    await writeNodeFiles(dir, fileSet('B'));
    assert.equal(await statOf(nodeFilePath(dir, 'kubeconfig')), 'permissions=600 regular file');
    assert.equal(await readFile(nodeFilePath(dir, 'kubeconfig'), 'utf8'), `B ${nodeFileNames.kubeconfig}\n`);

    // A directory an earlier version of join wrote, with the kubeconfig too a link through `..data`:
    // a set without a kubeconfig keeps that link resolving; the next one replaces it by a regular file.
    const linked = join(root, 'cis-linked');
    await mkdir(join(linked, '..v-old'), { recursive: true, mode: 0o700 });
    for (const { file, data, mode } of fileSet('A'))
      await writeFile(join(linked, '..v-old', nodeFileNames[file]), data, { mode });
    await symlink('..v-old', join(linked, '..data'));
    for (const name of Object.values(nodeFileNames)) await symlink(join('..data', name), join(linked, name));
    await writeNodeFiles(linked, fileSet('B', ['clientKey', 'clientCertificate']));
    assert.equal((await visibleTags(linked)).get(nodeFileNames.kubeconfig), 'A');
    await writeNodeFiles(linked, fileSet('C'));
    assert.equal(await statOf(nodeFilePath(linked, 'kubeconfig')), 'permissions=600 regular file');
    assert.deepEqual([...new Set((await visibleTags(linked)).values())], ['C']);
    const hidden = (await readdir(linked)).filter((name) => name.startsWith('..'));
    assert.equal(hidden.length, 2, `only ..data and the current version remain: ${hidden.join(', ')}`);
    // The old kubeconfig the earlier layout's link reached is not kept in the current version.
    assert.ok(
      !(await readdir(join(linked, '..data'))).includes(nodeFileNames.kubeconfig),
      'a stale kubeconfig stays in the current version',
    );
  });

  test('files the new set does not name are kept (a renewal without a serving certificate)', async () => {
    const dir = join(root, 'partial');
    await mkdir(dir, { mode: 0o700 });
    await writeNodeFiles(dir, fileSet('A'));
    await writeNodeFiles(dir, fileSet('B', ['clientKey', 'clientCertificate', 'caBundle', 'kubeconfig']));
    const tags = await visibleTags(dir);
    assert.equal(tags.get(nodeFileNames.clientCertificate), 'B');
    assert.equal(tags.get(nodeFileNames.serverCertificate), 'A');
    assert.equal(tags.get(nodeFileNames.serverKey), 'A');
    assert.ok((await lstat(nodeFilePath(dir, 'serverKey'))).isSymbolicLink());
  });

  test('a set that fails before it is published leaves the previous set and nothing else', async () => {
    const dir = join(root, 'failed');
    await mkdir(dir, { mode: 0o700 });
    await writeNodeFiles(dir, fileSet('A'));
    const entries = (await readdir(dir)).sort();
    // The same file twice: the second write into the new version fails (it exists).
    const broken = [...fileSet('B', ['clientKey']), ...fileSet('B', ['clientKey'])];
    await assert.rejects(writeNodeFiles(dir, broken), ConfigError);
    assert.deepEqual([...new Set((await visibleTags(dir)).values())], ['A']);
    assert.deepEqual((await readdir(dir)).sort(), entries);
  });

  test('an unwritable directory: a ConfigError naming it, nothing changed', async () => {
    const dir = join(root, 'missing', 'dir');
    await assert.rejects(writeNodeFiles(dir, fileSet('A')), (err) => {
      assert.ok(err instanceof ConfigError, String(err));
      assert.match(err.message, /cannot write .*missing\/dir.*; pass a writable --dir$/);
      return true;
    });
    await assert.rejects(stat(join(root, 'missing')), { code: 'ENOENT' });
  });
});
