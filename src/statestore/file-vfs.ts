/**
 * `file:///dir` (or a plain directory path): a state store on a local or mounted file system. Writes go
 * to a temporary file that is renamed into place, so a reader never sees half an object.
 */
import { randomBytes } from 'node:crypto';
import type { Dirent } from 'node:fs';
import { readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { dirname, join, relative as relativePath, sep } from 'node:path';
import { pathToFileURL } from 'node:url';
import { ConfigError, NotFoundError, TooLargeError, UnavailableError } from '../errors.ts';
import { makeDirectory } from '../make-directory.ts';
import { checkListPrefix, checkObjectPath } from './paths.ts';
import { maxObjectBytes, type StoredObject, type Vfs } from './types.ts';

const tempPrefix = '.kops-controller-tmp-';

function versionOf(info: { ino: bigint; mtimeNs: bigint; size: bigint }): string {
  // The inode changes on every atomic replace; mtime and size catch in-place edits.
  return `${info.ino}-${info.mtimeNs}-${info.size}`;
}

function isMissing(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException).code;
  return code === 'ENOENT' || code === 'ENOTDIR';
}

/**
 * Why a write failed, in words, when retrying cannot help: the folder is a file, cannot be created
 * or is not ours to write — a wrong path (`--dir`, `--to`, `configBase`), so a configuration error.
 * Anything else (a full disk, an I/O error) is a failing dependency.
 */
function unwritableReason(err: unknown): string | undefined {
  switch ((err as NodeJS.ErrnoException).code) {
    case 'ENOTDIR':
    case 'EEXIST': // mkdir of a name a file already has
      return 'a parent is not a directory';
    case 'ENOENT': // after the parents were made: the kernel refuses the name (/proc, /sys)
      return 'its directory cannot be created';
    case 'EISDIR':
      return 'is a directory';
    case 'EACCES':
    case 'EPERM':
      return 'permission denied';
    case 'EROFS':
      return 'read-only file system';
    default:
      return undefined;
  }
}

/** A VFS over a directory tree. */
export class FileVfs implements Vfs {
  readonly url: string;
  readonly #dir: string;

  constructor(dir: string) {
    this.#dir = dir.length > 1 ? dir.replace(/\/+$/, '') : dir;
    this.url = pathToFileURL(this.#dir).href;
  }

  #file(path: string): string {
    return join(this.#dir, checkObjectPath(path));
  }

  #failure(action: string, path: string, err: unknown): Error {
    if (isMissing(err)) return new NotFoundError(`${this.url}/${path} does not exist`, { cause: err });
    return new UnavailableError(`cannot ${action} ${this.url}/${path}: ${(err as Error).message}`, {
      cause: err,
    });
  }

  async read(path: string): Promise<StoredObject> {
    const file = this.#file(path);
    try {
      // The version is taken before reading: if the file is replaced in between, the data is newer
      // than the version says, so the next poll sees a new version and reads it again.
      const info = await stat(file, { bigint: true });
      if (!info.isFile()) throw new NotFoundError(`${this.url}/${path} is not a file`);
      if (info.size > BigInt(maxObjectBytes)) {
        throw new TooLargeError(
          `cannot read ${this.url}/${path}: the file is larger than ${maxObjectBytes} bytes, which no kops object is`,
        );
      }
      return { data: await readFile(file), version: versionOf(info) };
    } catch (err) {
      if (err instanceof NotFoundError || err instanceof TooLargeError) throw err;
      throw this.#failure('read', path, err);
    }
  }

  async stat(path: string): Promise<string | undefined> {
    const file = this.#file(path);
    try {
      const info = await stat(file, { bigint: true });
      return info.isFile() ? versionOf(info) : undefined;
    } catch (err) {
      if (isMissing(err)) return undefined;
      throw this.#failure('stat', path, err);
    }
  }

  async write(path: string, data: Buffer | string, options: { mode?: number } = {}): Promise<void> {
    const file = this.#file(path);
    const temp = join(dirname(file), `${tempPrefix}${randomBytes(6).toString('hex')}`);
    try {
      await makeDirectory(dirname(file));
      await writeFile(temp, data, { mode: options.mode ?? 0o644, flush: true });
      await rename(temp, file);
    } catch (err) {
      // Best effort: when the folder could not be made there is no temporary file, and removing it
      // fails too (ENOTDIR under a regular file); the write's own error is the one to report.
      await rm(temp, { force: true }).catch(() => undefined);
      const reason = unwritableReason(err);
      // The reason is the whole story; the system error's text would only repeat it.
      if (reason) throw new ConfigError(`cannot write ${this.url}/${path}: ${reason}`);
      throw new UnavailableError(`cannot write ${this.url}/${path}: ${(err as Error).message}`, {
        cause: err,
      });
    }
  }

  async list(prefix: string): Promise<string[]> {
    checkListPrefix(prefix);
    // Only the directories that can hold matches are walked.
    const base = prefix.includes('/') ? prefix.slice(0, prefix.lastIndexOf('/')) : '';
    const start = join(this.#dir, base);
    let entries: Dirent[];
    try {
      entries = await readdir(start, { recursive: true, withFileTypes: true });
    } catch (err) {
      if (isMissing(err)) return [];
      throw this.#failure('list', prefix, err);
    }
    const found: string[] = [];
    for (const entry of entries) {
      if (!entry.isFile() || entry.name.startsWith(tempPrefix)) continue;
      const relative = relativePath(this.#dir, join(entry.parentPath, entry.name)).split(sep).join('/');
      if (relative.startsWith(prefix)) found.push(relative);
    }
    return found.sort();
  }

  async delete(path: string): Promise<void> {
    try {
      await rm(this.#file(path), { force: true });
    } catch (err) {
      throw this.#failure('delete', path, err);
    }
  }
}
