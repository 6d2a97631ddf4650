/** A {@link Clock} for tests: time moves only when the test advances it, so timing tests are exact. */
import type { Clock } from '../runtime/clock.ts';

interface PendingTimer {
  at: number;
  seq: number;
  fn: () => void;
}

/** Lets pending promise callbacks (and the I/O they started on loopback) run. */
export function settle(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/**
 * A fake clock; `advance` fires due timers in time order, letting promise chains run after each.
 * `advance` moves the wall clock and the monotonic clock together; `stepWall` moves the wall clock
 * alone, as an NTP step does.
 */
export class FakeClock implements Clock {
  #now: number;
  #start: number;
  #wallStep = 0;
  #seq = 0;
  #timers: PendingTimer[] = [];

  constructor(start = Date.UTC(2026, 0, 1)) {
    this.#now = start;
    this.#start = start;
  }

  now(): number {
    return this.#now + this.#wallStep;
  }

  /** Milliseconds advanced since this clock was made (a different origin from `now`, as in Node). */
  monotonic(): number {
    return this.#now - this.#start;
  }

  /** Steps the wall clock by `ms` (negative: back); timers and the monotonic clock do not move. */
  stepWall(ms: number): void {
    this.#wallStep += ms;
  }

  setTimer(fn: () => void, ms: number): () => void {
    const timer = { at: this.#now + Math.max(0, ms), seq: this.#seq++, fn };
    this.#timers.push(timer);
    return () => {
      this.#timers = this.#timers.filter((t) => t !== timer);
    };
  }

  /** How many timers are waiting. */
  get pending(): number {
    return this.#timers.length;
  }

  /** Moves time forward by `ms`, firing every timer that falls due on the way. */
  async advance(ms: number): Promise<void> {
    const target = this.#now + ms;
    await settle();
    for (;;) {
      const due = this.#timers.filter((t) => t.at <= target).sort((a, b) => a.at - b.at || a.seq - b.seq)[0];
      if (!due) break;
      this.#timers = this.#timers.filter((t) => t !== due);
      this.#now = Math.max(this.#now, due.at);
      due.fn();
      await settle();
    }
    this.#now = target;
    await settle();
  }
}
