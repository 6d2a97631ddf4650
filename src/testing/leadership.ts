/** Test helpers for leader-only components. */

/** Ends a leadership term (`leading` aborts) and says how long the component's `run` took to return, in ms. */
export async function msToStop(leading: AbortController, run: Promise<unknown>): Promise<number> {
  const abortedAt = performance.now();
  leading.abort();
  await run;
  return performance.now() - abortedAt;
}
