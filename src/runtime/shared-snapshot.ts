/**
 * A value that is costly to build and asked for by anyone: the operations port's `/metrics`
 * exposition, which with serving workers asks every worker over IPC and aggregates their answers.
 * Callers that ask while a build runs wait for that build, and a finished value answers every caller
 * for `reuseMs` after it finished. However many callers there are, a build starts at most once per
 * `reuseMs`, or per `shareMs` while one is still running. A failed build fails the callers that
 * waited on it and is never kept: the next caller builds again. A build still running after
 * `shareMs` is no longer shared: one that never settles (a collect awaiting what never answers)
 * would otherwise hold every later caller for good, where a new build would answer; so stuck builds
 * can pile up, one per `shareMs` at most, and a late one never replaces a newer value.
 */
import type { Clock } from './clock.ts';

/** Options of {@link SharedSnapshot}. */
export interface SharedSnapshotOptions {
  /** How long a finished value answers callers, in milliseconds of monotonic time. */
  reuseMs: number;
  /** How long a running build is shared with new callers (default 10 s). */
  shareMs?: number;
  clock: Pick<Clock, 'monotonic'>;
}

/**
 * How long a running build is shared: well above what a healthy one takes (the serving workers'
 * reports are bounded at 2 s), well below Prometheus' scrape timeout of a stuck one mattering.
 */
const defaultShareMs = 10_000;

/** One build shared by concurrent callers, and its result reused for a short interval. */
export class SharedSnapshot<T> {
  readonly #build: () => Promise<T>;
  readonly #reuseMs: number;
  readonly #clock: Pick<Clock, 'monotonic'>;
  readonly #shareMs: number;
  /** The build in progress, which every caller until it settles (or `shareMs` passes) waits on. */
  #building: { promise: Promise<T>; since: number } | undefined;
  /** The last value a build finished with, and when (monotonic). */
  #last: { value: T; at: number; started: number } | undefined;

  constructor(build: () => Promise<T>, options: SharedSnapshotOptions) {
    this.#build = build;
    this.#reuseMs = options.reuseMs;
    this.#shareMs = options.shareMs ?? defaultShareMs;
    this.#clock = options.clock;
  }

  /** The last value while it is younger than `reuseMs`, else the result of the build in progress or a new one. */
  get(): Promise<T> {
    const now = this.#clock.monotonic();
    const last = this.#last;
    if (last && now - last.at < this.#reuseMs) return Promise.resolve(last.value);
    if (this.#building && now - this.#building.since < this.#shareMs) return this.#building.promise;
    let started: Promise<T>;
    try {
      started = this.#build();
    } catch (err) {
      started = Promise.reject(err);
    }
    // Settles in a later microtask whatever the build did, so `finally` runs after the assignment
    // below and clears it: a failure is never left in place for the next caller.
    const building = started
      .then((value) => {
        // A build given up on that finishes after a newer one does not replace the newer value.
        if (!this.#last || this.#last.started <= now)
          this.#last = { value, at: this.#clock.monotonic(), started: now };
        return value;
      })
      .finally(() => {
        if (this.#building?.promise === building) this.#building = undefined;
      });
    this.#building = { promise: building, since: now };
    return building;
  }
}
