/**
 * A value that is costly to build and asked for by anyone: the operations port's `/metrics`
 * exposition, which with serving workers asks every worker over IPC and aggregates their answers.
 * Callers that ask while a build runs wait for that build, and a finished value answers every caller
 * for `reuseMs` after it finished. However many callers there are, at most one build runs at a time,
 * and builds start at most once per `reuseMs`. A failed build fails the callers that waited on it and
 * is never kept: the next caller builds again.
 */
import type { Clock } from './clock.ts';

/** Options of {@link SharedSnapshot}. */
export interface SharedSnapshotOptions {
  /** How long a finished value answers callers, in milliseconds of monotonic time. */
  reuseMs: number;
  clock: Pick<Clock, 'monotonic'>;
}

/** One build shared by concurrent callers, and its result reused for a short interval. */
export class SharedSnapshot<T> {
  readonly #build: () => Promise<T>;
  readonly #reuseMs: number;
  readonly #clock: Pick<Clock, 'monotonic'>;
  /** The build in progress, which every caller until it settles waits on. */
  #building: Promise<T> | undefined;
  /** The last value a build finished with, and when (monotonic). */
  #last: { value: T; at: number } | undefined;

  constructor(build: () => Promise<T>, options: SharedSnapshotOptions) {
    this.#build = build;
    this.#reuseMs = options.reuseMs;
    this.#clock = options.clock;
  }

  /** The last value while it is younger than `reuseMs`, else the result of the build in progress or a new one. */
  get(): Promise<T> {
    const last = this.#last;
    if (last && this.#clock.monotonic() - last.at < this.#reuseMs) return Promise.resolve(last.value);
    if (this.#building) return this.#building;
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
        this.#last = { value, at: this.#clock.monotonic() };
        return value;
      })
      .finally(() => {
        this.#building = undefined;
      });
    this.#building = building;
    return building;
  }
}
