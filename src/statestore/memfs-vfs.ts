/**
 * `memfs://authority/prefix`: an in-process store. Every VFS opened on the same authority shares one
 * set of objects, so a test or `kops-controller dev` can seed it and the controller reads it back.
 */
import { NotFoundError } from '../errors.ts';
import { checkObjectPath, joinKey, listScope, trimSlashes } from './paths.ts';
import type { StoredObject, Vfs } from './types.ts';

const buckets = new Map<string, Map<string, StoredObject>>();
let nextVersion = 1;

function bucket(authority: string): Map<string, StoredObject> {
  let objects = buckets.get(authority);
  if (!objects) {
    objects = new Map();
    buckets.set(authority, objects);
  }
  return objects;
}

/** Drops every object of one memfs authority (tests use a fresh authority each, or clear it). */
export function clearMemfs(authority: string): void {
  buckets.delete(authority);
}

/** A VFS over the in-process object map of `url`'s authority. */
export class MemfsVfs implements Vfs {
  readonly url: string;
  readonly #objects: Map<string, StoredObject>;
  readonly #root: string;

  constructor(url: URL) {
    this.url = url.href.replace(/\/+$/, '');
    this.#objects = bucket(url.host);
    this.#root = trimSlashes(decodeURIComponent(url.pathname));
  }

  async read(path: string): Promise<StoredObject> {
    const object = this.#objects.get(joinKey(this.#root, checkObjectPath(path)));
    if (!object) throw new NotFoundError(`${this.url}/${path} does not exist`);
    return { data: Buffer.from(object.data), version: object.version };
  }

  async stat(path: string): Promise<string | undefined> {
    return this.#objects.get(joinKey(this.#root, checkObjectPath(path)))?.version;
  }

  async write(path: string, data: Buffer | string): Promise<void> {
    this.#objects.set(joinKey(this.#root, checkObjectPath(path)), {
      data: Buffer.from(data),
      version: String(nextVersion++),
    });
  }

  async list(prefix: string): Promise<string[]> {
    const { full, strip } = listScope(this.#root, prefix);
    return [...this.#objects.keys()]
      .filter((key) => key.startsWith(full))
      .map((key) => key.slice(strip))
      .sort();
  }

  async delete(path: string): Promise<void> {
    this.#objects.delete(joinKey(this.#root, checkObjectPath(path)));
  }
}
