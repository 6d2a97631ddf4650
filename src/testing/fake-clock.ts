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

/** A fake clock; `advance` fires due timers in time order, letting promise chains run after each. */
export class FakeClock implements Clock {
  #now: number;
  #seq = 0;
  #timers: PendingTimer[] = [];

  constructor(start = Date.UTC(2026, 0, 1)) {
    this.#now = start;
  }

  now(): number {
    return this.#now;
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
