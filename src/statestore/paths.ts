/** Object paths inside a state store: validated once here so no backend can be walked out of its root. */
import { InvalidInputError } from '../errors.ts';

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
