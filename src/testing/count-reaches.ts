/** Test helper: wait, in real time, for a counter (a metric read back) to reach a value. */
import assert from 'node:assert/strict';

/**
 * Polls `read` every 5 ms until it returns at least `n`; fails after `ms` (default 10 s), saying how
 * many `what` were counted.
 */
export async function countReaches(
  read: () => Promise<number>,
  n: number,
  what: string,
  ms = 10_000,
): Promise<void> {
  const until = Date.now() + ms;
  while ((await read()) < n) {
    if (Date.now() > until) assert.fail(`${await read()} ${what} counted, not ${n}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}
