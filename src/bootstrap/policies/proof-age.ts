/**
 * How a refusal for a proof's age reads: the age on this controller's clock in words, so that the
 * reason says which way the clocks disagree rather than a signed number of seconds.
 */

/** `ageMs` (this controller's time minus the proof's) in words: "331 s ago", "329 s in the future". */
export function describeAge(ageMs: number): string {
  const seconds = Math.round(ageMs / 1000);
  return seconds < 0 ? `${-seconds} s in the future` : `${seconds} s ago`;
}
