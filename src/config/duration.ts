/** Go-style durations ("15s", "1m30s", "500ms", "1h"), the format kops and Kubernetes configs use. */
import { InvalidInputError } from '../errors.ts';

const unitMs: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  µs: 1e-3,
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};
const component = /(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/gy;

/** Parses a Go duration string into milliseconds; a bare number is taken as seconds. */
export function parseDuration(input: string | number): number {
  if (typeof input === 'number') {
    if (!Number.isFinite(input) || input < 0) throw new InvalidInputError(`invalid duration ${input}`);
    return input * 1000;
  }
  const text = input.trim();
  if (/^\d+(\.\d+)?$/.test(text)) return Number(text) * 1000;
  if (text === '0') return 0;
  component.lastIndex = 0;
  let total = 0;
  let consumed = 0;
  for (let match = component.exec(text); match; match = component.exec(text)) {
    total += Number(match[1]) * (unitMs[match[2] as string] as number);
    consumed = component.lastIndex;
  }
  if (consumed === 0 || consumed !== text.length) {
    throw new InvalidInputError(
      `invalid duration "${input}": use a Go duration such as "15s", "1m30s" or "2h"`,
    );
  }
  return total;
}

/** Formats milliseconds as a short Go-style duration. */
export function formatDuration(ms: number): string {
  if (ms % 3_600_000 === 0 && ms > 0) return `${ms / 3_600_000}h`;
  if (ms % 60_000 === 0 && ms > 0) return `${ms / 60_000}m`;
  if (ms % 1000 === 0) return `${ms / 1000}s`;
  return `${ms}ms`;
}
