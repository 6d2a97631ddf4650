/**
 * Writes the node's credentials so that a crash never leaves them half-written or mismatched (a new
 * key beside the old certificate). The files of one join are written into a fresh version directory
 * inside `--dir`, flushed, and published all at once by renaming one symbolic link, `..data`, to point
 * at it (atomic on POSIX file systems); each file of `--dir` is a link through `..data`, so a reader
 * sees the old set or the new set, never a mix. This is how the kubelet's projected volumes publish
 * Secrets. Keys are created 0600 from the first byte, never widened later.
 *
 * The kubeconfig is the exception: it is a regular file, replaced by renaming a new one over it after
 * the set is published. Security scanners read its mode with `stat` without following links (kube-bench,
 * CIS 4.1.5: `stat -c permissions=%a $kubeletkubeconfig`, which shows any link as 777), and it needs no
 * link: it embeds its certificate, key and CAs, so the old one or the new one is whole by itself.
 */
import { randomBytes } from 'node:crypto';
import { link, lstat, mkdtemp, open, readdir, readlink, rename, rm, symlink } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { ConfigError } from '../errors.ts';
import { makeDirectory } from '../make-directory.ts';

/** The files `join` writes into its directory. */
export const nodeFileNames = {
  clientCertificate: 'kubelet-client.crt',
  clientKey: 'kubelet-client.key',
  serverCertificate: 'kubelet-server.crt',
  serverKey: 'kubelet-server.key',
  caBundle: 'ca.crt',
  kubeconfig: 'kubelet.kubeconfig',
} as const;

/**
 * Files published as regular files, each renamed into place after the set's links (see the module
 * comment): a reader that does not follow links sees their own mode.
 */
const regularFiles: ReadonlySet<string> = new Set([nodeFileNames.kubeconfig]);

/** One of the files `join` writes. */
export type NodeFile = keyof typeof nodeFileNames;

/** One file of a set to publish, with its content and mode. */
export interface NodeFileContent {
  file: NodeFile;
  data: string;
  mode: number;
}

/** The link every node file goes through; renaming it publishes a version. */
const dataLink = '..data';
/** Version directories are `..v-<random>`: hidden, and never a node file's name. */
const versionPrefix = '..v-';

/** Creates `path` (which must not exist) with `mode` from the first byte, and flushes it. */
async function writeNewFile(path: string, data: string, mode: number): Promise<void> {
  const handle = await open(path, 'wx', mode);
  try {
    await handle.writeFile(data);
    await handle.sync();
  } finally {
    await handle.close();
  }
}

function writeError(path: string, err: unknown): ConfigError {
  return new ConfigError(`cannot write ${path}: ${(err as Error).message}; pass a writable --dir`, {
    cause: err,
  });
}

/** Flushes a directory's entries (the renames and links made in it) to disk. */
async function syncDirectory(dir: string): Promise<void> {
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** Points `name` in `dir` at `target` atomically: a new link beside it, renamed over it. */
async function replaceLink(dir: string, name: string, target: string): Promise<void> {
  const temporary = join(dir, `${versionPrefix}link-${randomBytes(6).toString('hex')}`);
  await symlink(target, temporary);
  await rename(temporary, join(dir, name));
}

/** What `path` is now: absent, a link (with its target) or a regular file. */
async function entryOf(path: string): Promise<'absent' | 'file' | { link: string }> {
  try {
    const stats = await lstat(path);
    if (stats.isSymbolicLink()) return { link: await readlink(path) };
    return 'file';
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 'absent';
    throw err;
  }
}

/**
 * The version `..data` points at now. A directory written by an earlier `join` holds the node files
 * themselves: they are moved under a version first (hard links, then each file replaced by a link to
 * the same bytes), so every step of the move shows the same, old, set.
 */
async function currentVersion(dir: string): Promise<string | undefined> {
  const data = await entryOf(join(dir, dataLink));
  if (typeof data === 'object') return data.link;
  const plain: string[] = [];
  for (const name of Object.values(nodeFileNames)) {
    if (!regularFiles.has(name) && (await entryOf(join(dir, name))) === 'file') plain.push(name);
  }
  if (plain.length === 0) return undefined;
  const version = await mkdtemp(join(dir, versionPrefix));
  for (const name of plain) await link(join(dir, name), join(version, name));
  await syncDirectory(version);
  const target = basename(version);
  await replaceLink(dir, dataLink, target);
  for (const name of plain) await replaceLink(dir, name, join(dataLink, name));
  await syncDirectory(dir);
  return target;
}

/**
 * Publishes `files` in `dir` as one set: after a crash at any point `dir` shows either the previous
 * set or this one (files of the previous set that this one does not replace are kept). Files are
 * linked in the order given, then the regular files (the kubeconfig) are renamed into place, so the
 * last one's presence means every other is in place; a regular file is never newer than the links.
 * Returns the paths of `files`.
 */
export async function writeNodeFiles(dir: string, files: readonly NodeFileContent[]): Promise<string[]> {
  let unpublished: string | undefined;
  try {
    const previous = await currentVersion(dir);
    const version = await mkdtemp(join(dir, versionPrefix));
    unpublished = version;
    const target = basename(version);
    const linked = files.filter(({ file }) => !regularFiles.has(nodeFileNames[file]));
    const names = new Set<string>(linked.map(({ file }) => nodeFileNames[file]));
    for (const { file, data, mode } of linked)
      await writeNewFile(join(version, nodeFileNames[file]), data, mode);
    if (previous) {
      for (const name of await readdir(join(dir, previous))) {
        // A regular file that is already in place needs no copy; one still reached through `..data`
        // (an earlier layout) is carried so that its link resolves until the new file replaces it.
        if (names.has(name) || (regularFiles.has(name) && (await entryOf(join(dir, name))) === 'file'))
          continue;
        await link(join(dir, previous, name), join(version, name));
      }
    }
    await syncDirectory(version);
    await replaceLink(dir, dataLink, target);
    unpublished = undefined;
    for (const name of names) {
      const entry = await entryOf(join(dir, name));
      if (typeof entry !== 'object' || entry.link !== join(dataLink, name)) {
        await replaceLink(dir, name, join(dataLink, name));
      }
    }
    for (const { file, data, mode } of files) {
      if (!regularFiles.has(nodeFileNames[file])) continue;
      // A hidden name a crash may leave behind: the next write removes it with the stale versions.
      const temporary = join(dir, `${versionPrefix}file-${randomBytes(6).toString('hex')}`);
      unpublished = temporary;
      await writeNewFile(temporary, data, mode);
      await rename(temporary, join(dir, nodeFileNames[file]));
      unpublished = undefined;
      // The copy an earlier layout's link reached, carried until now: no stale key material is kept.
      await rm(join(version, nodeFileNames[file]), { force: true });
    }
    await syncDirectory(dir);
    await removeStaleVersions(dir, target);
  } catch (err) {
    // A set or file that failed before it was published leaves nothing behind.
    if (unpublished) await rm(unpublished, { recursive: true, force: true });
    throw err instanceof ConfigError ? err : writeError(dir, err);
  }
  return files.map(({ file }) => nodeFilePath(dir, file));
}

/** Removes every version but `current`, and links a crash left behind. */
async function removeStaleVersions(dir: string, current: string): Promise<void> {
  for (const name of await readdir(dir)) {
    if (name.startsWith(versionPrefix) && name !== current) {
      await rm(join(dir, name), { recursive: true, force: true });
    }
  }
}

/** Creates the credentials directory (0700) if it does not exist. */
export async function ensureDirectory(dir: string): Promise<void> {
  try {
    await makeDirectory(dir, 0o700);
  } catch (err) {
    throw new ConfigError(`cannot create ${dir}: ${(err as Error).message}; pass a writable --dir`, {
      cause: err,
    });
  }
}

/** The path of one of the node files in `dir`. */
export function nodeFilePath(dir: string, file: NodeFile): string {
  return join(dir, nodeFileNames[file]);
}
