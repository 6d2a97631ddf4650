/**
 * Which incarnation of a GCE instance an instance read is: a MIG that recreates an instance (its
 * `recreateInstances`, autohealing) keeps the name — the node name and the providerID — and gives the
 * machine a new numeric `id` and `creationTimestamp`. Pure: the identifier reads, this reads the answer.
 */
import { UnavailableError } from '../../errors.ts';
import type { Incarnation } from '../types.ts';
import type { GceInstance } from './compute.ts';

/** RFC 3339, as the compute API writes `creationTimestamp` (`2026-06-27T03:10:47.431-07:00`). */
const rfc3339 = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?(?:Z|([+-])(\d{2}):(\d{2}))$/;

/** The time an RFC 3339 text names, or undefined when it names none (`02-30`, `24:00`: no rolling over). */
function rfc3339Time(text: string): Date | undefined {
  const match = rfc3339.exec(text);
  if (!match) return undefined;
  const fields = match.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  const [y, mo, d, h, mi, sec] = fields;
  const local = new Date(Date.UTC(y, mo - 1, d, h, mi, sec));
  const read = [
    local.getUTCFullYear(),
    local.getUTCMonth() + 1,
    local.getUTCDate(),
    local.getUTCHours(),
    local.getUTCMinutes(),
    local.getUTCSeconds(),
  ];
  if (read.some((field, i) => field !== fields[i])) return undefined;
  const [, , , , , , , fraction, sign, offsetHours, offsetMinutes] = match;
  const offsetMs = sign
    ? (sign === '-' ? -1 : 1) * (Number(offsetHours) * 60 + Number(offsetMinutes)) * 60_000
    : 0;
  const ms = fraction ? Math.floor(Number(fraction) * 1000) : 0;
  return new Date(local.getTime() - offsetMs + ms);
}

/**
 * The incarnation an instance read names: its numeric `id` (a uint64 the API sends as a decimal
 * string; a MIG that recreates an instance keeps the name, never the id) and its `creationTimestamp`.
 * An answer whose id or time cannot be read is a fault of the answer (UnavailableError), never an
 * instance without an incarnation: a trust decision rests on it.
 */
export function incarnationOf(instance: GceInstance): Incarnation | UnavailableError {
  const malformed = (what: string) =>
    new UnavailableError(`the compute API answered instance ${instance.name} with ${what}`, {
      details: { reason: 'malformed-answer' },
    });
  const { id, creationTimestamp } = instance as { id: unknown; creationTimestamp?: unknown };
  if (typeof id !== 'string' || !/^\d{1,20}$/.test(id) || BigInt(id) >= 2n ** 64n) {
    return malformed(`the id ${JSON.stringify(id)?.slice(0, 40)}, not a uint64 in decimal`);
  }
  if (creationTimestamp === undefined) return { id };
  const createdAt = typeof creationTimestamp === 'string' ? rfc3339Time(creationTimestamp) : undefined;
  if (!createdAt) {
    return malformed(
      `the creationTimestamp ${JSON.stringify(creationTimestamp)?.slice(0, 40)}, not an RFC 3339 time`,
    );
  }
  return { id, createdAt };
}
