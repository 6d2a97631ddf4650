/**
 * How the identity caches, listings and polls tell whether what they hold is young enough. Ages are
 * measured on the monotonic clock: the wall clock is stepped back when NTP corrects a clock that ran
 * ahead, and an entry written meanwhile would then look younger than it is for as long as the clock
 * had been ahead, so a lookup that asks for the cloud's answer now would be served from the cache.
 */

/** The default clock of every cache and poll: milliseconds from an arbitrary origin, never stepped. */
export const monotonicMs = (): number => performance.now();

/**
 * Whether something read at `at` is younger than `maxAgeMs` at `now` (both on the same clock). A
 * negative age, which only a clock that went back gives (an injected wall clock), counts as expired:
 * the caller reads again rather than trusting a time it cannot place.
 */
export function youngerThan(at: number, now: number, maxAgeMs: number): boolean {
  const age = now - at;
  return age >= 0 && age < maxAgeMs;
}
