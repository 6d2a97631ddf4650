/**
 * Refusing an older copy of a state-store object: a lagging replica, a cache or a proxy answering an
 * earlier version than the one in use. An ETag is not ordered, so a changed one alone does not say
 * which copy is newer; the store's `Last-Modified` does. An edit gets a newer time and passes at once.
 */
import { UnavailableError } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { StoredObject } from './types.ts';

/**
 * How long the store may keep answering a copy older than the one in use before it is believed: a
 * lagging replica or cache catches up within this; an older copy answered longer is the store's
 * truth (a file restored with its time kept, a writer whose clock is behind), not to be refused for
 * ever.
 */
export const olderCopyGraceMs = 10 * 60_000;

/** Remembers, by path, the older copy the store answers and since when, to believe it after the grace. */
export class OlderCopyGuard {
  readonly #url: string;
  readonly #monotonic: () => number;
  readonly #logger: Logger;
  readonly #seen = new Map<string, { version: string; sinceMs: number }>();

  /** `url` is the store's, for messages; `monotonic` times the grace. */
  constructor(url: string, monotonic: () => number, logger: Logger) {
    this.#url = url;
    this.#monotonic = monotonic;
    this.#logger = logger;
  }

  /**
   * Throws UnavailableError when `read` is older than the copy `inUse` and has not been answered for
   * the whole grace; past it, logs a warning and returns (the older copy is believed).
   */
  check(
    path: string,
    inUse: { modifiedMs?: number },
    read: Pick<StoredObject, 'modifiedMs' | 'version'>,
  ): void {
    if (
      inUse.modifiedMs === undefined ||
      read.modifiedMs === undefined ||
      read.modifiedMs >= inUse.modifiedMs
    ) {
      this.#seen.delete(path);
      return;
    }
    const now = this.#monotonic();
    const seen = this.#seen.get(path);
    const sinceMs = seen?.version === read.version ? seen.sinceMs : now;
    const described =
      `${this.#url}/${path}: the store answers a version last modified ` +
      `${new Date(read.modifiedMs).toISOString()}, older than the one in use (${new Date(inUse.modifiedMs).toISOString()})`;
    if (now - sinceMs >= olderCopyGraceMs) {
      this.#seen.delete(path);
      this.#logger.warn(
        { path, version: read.version },
        `${described}, for ${Math.round((now - sinceMs) / 60_000)} minutes: believed (restored with its time kept, or written by a clock that is behind)`,
      );
      return;
    }
    this.#seen.set(path, { version: read.version, sinceMs });
    throw new UnavailableError(`${described}: a lagging replica or cache; keeping the newer one`);
  }
}
