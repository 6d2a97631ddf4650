/**
 * Random bytes for values drawn once per request (certificate serials, request ids), taken from a
 * 4 KiB pool: one call into OpenSSL per few hundred values instead of one each. Only for values that
 * are unique but not secret; keys and tokens use crypto.randomBytes directly.
 */
import { randomBytes } from 'node:crypto';

let pool = Buffer.alloc(0);
let offset = 0;

/** `count` (at most 4096) random bytes, a view of the pool: copy them if you keep them past use. */
export function pooledRandomBytes(count: number): Buffer {
  if (count > 4096) throw new RangeError(`at most 4096 pooled random bytes at a time, not ${count}`);
  if (offset + count > pool.length) {
    pool = randomBytes(4096);
    offset = 0;
  }
  const bytes = pool.subarray(offset, offset + count);
  offset += count;
  return bytes;
}
