/** Object paths inside a state store: validated once here so no backend can be walked out of its root. */
import { InvalidInputError, UnavailableError } from '../errors.ts';

/**
 * Checks a path relative to a VFS root (`instancegroup/nodes`): no leading slash, no empty, `.` or
 * `..` segments, no NUL. Returns it unchanged.
 */
export function checkObjectPath(path: string): string {
  if (path === '' || path.startsWith('/') || path.includes('\0')) {
    throw new InvalidInputError(
      `invalid state-store path "${path}": use a non-empty path relative to the store root`,
    );
  }
  for (const segment of path.split('/')) {
    if (segment === '' || segment === '.' || segment === '..') {
      throw new InvalidInputError(
        `invalid state-store path "${path}": empty, "." and ".." segments are not allowed`,
      );
    }
  }
  return path;
}

/** Checks a list prefix: empty (everything) or a relative path, optionally ending in `/`. */
export function checkListPrefix(prefix: string): string {
  if (prefix === '') return prefix;
  checkObjectPath(prefix.endsWith('/') ? prefix.slice(0, -1) : prefix);
  return prefix;
}

/** Joins a root key prefix (no leading or trailing slash, possibly empty) and a relative path. */
export function joinKey(root: string, path: string): string {
  return root === '' ? path : `${root}/${path}`;
}

/** Strips slashes from both ends of a URL path, giving the key prefix of a bucket-based store. */
export function trimSlashes(path: string): string {
  return path.replace(/^\/+|\/+$/g, '');
}

/** The bucket and key prefix of a `scheme://bucket/prefix` store URL, and that URL written canonically. */
export function bucketLocation(url: URL, scheme: string): { bucket: string; root: string; url: string } {
  const root = trimSlashes(decodeURIComponent(url.pathname));
  return { bucket: url.host, root, url: `${scheme}://${url.host}${root ? `/${root}` : ''}` };
}

/**
 * The key prefix that lists `prefix` under `root`, and how many leading characters of a listed key
 * to drop to make it relative to `root` again.
 */
export function listScope(root: string, prefix: string): { full: string; strip: number } {
  return { full: joinKey(root, checkListPrefix(prefix)), strip: root === '' ? 0 : root.length + 1 };
}

/**
 * The most pages one listing reads: a kops cluster's folders hold hundreds of objects (a page is up to
 * 1,000 names on S3, GCS and Swift, 5,000 on Azure), so a listing still going after this many pages
 * is a store that never ends it (a buggy S3-compatible store, a proxy), not a state store.
 */
const maxListPages = 1_000;

/** Whether `path` is a relative object path {@link checkObjectPath} accepts. */
export function isObjectPath(path: string): boolean {
  try {
    checkObjectPath(path);
    return true;
  } catch {
    return false;
  }
}

/**
 * The pages of one listing, checked as they come, since a broken store (or a proxy before it) may
 * answer anything: a key outside the prefix asked for refuses the whole listing (another cluster's
 * objects must never pass for this one's), a key with `..`, `.` or empty segments is left out (no
 * object path can name it), a key listed twice is listed once, and a continuation token (or marker)
 * that comes back, or more than {@link maxListPages} pages, ends the listing with an
 * UnavailableError instead of an endless loop.
 */
export class ListingPages {
  readonly #where: string;
  readonly #full: string;
  readonly #strip: number;
  readonly #keys = new Set<string>();
  readonly #tokens = new Set<string>();
  #pages = 0;

  /** `where` names the listing in errors (`s3://bucket/root/prefix`); `full`/`strip` as {@link listScope}. */
  constructor(where: string, scope: { full: string; strip: number }) {
    this.#where = where;
    this.#full = scope.full;
    this.#strip = scope.strip;
  }

  /** Counts one more page, refusing one past the limit; call before asking for it. */
  beginPage(): void {
    if (++this.#pages > maxListPages) {
      throw new UnavailableError(
        `cannot list ${this.#where}: the store is still listing after ${maxListPages} pages, ` +
          'far more than a state store holds; a broken store or proxy never ends this listing',
      );
    }
  }

  /** Adds the full keys (as the store names them) of one page. */
  add(keys: Iterable<string>): void {
    for (const key of keys) {
      if (!key.startsWith(this.#full)) {
        throw new UnavailableError(
          `cannot list ${this.#where}: the store listed "${key}", which is outside the prefix "${this.#full}" ` +
            'asked for; a broken store or proxy, so nothing of this listing is used',
        );
      }
      const relative = key.slice(this.#strip);
      if (isObjectPath(relative)) this.#keys.add(relative);
    }
  }

  /** The token of the next page, or undefined at the end; a token seen before is refused. */
  next(token: string | undefined): string | undefined {
    if (token === undefined || token === '') return undefined;
    if (this.#tokens.has(token)) {
      throw new UnavailableError(
        `cannot list ${this.#where}: the store repeated the continuation token (or marker) of an ` +
          'earlier page, so its listing would never end; a broken store or proxy',
      );
    }
    this.#tokens.add(token);
    return token;
  }

  /** The relative paths listed, sorted. */
  keys(): string[] {
    return [...this.#keys].sort();
  }
}
