/**
 * Which incarnation of a GCE instance an instance read is: a MIG that recreates an instance (its
 * `recreateInstances`, autohealing) keeps the name — the node name and the providerID — and gives the
 * machine a new numeric `id` and `creationTimestamp`. Pure: the identifier reads, this reads the answer.
 */
import { UnavailableError } from '../../errors.ts';
import { cloudTime } from '../cloud-time.ts';
import type { Incarnation } from '../types.ts';
import type { GceInstance } from './compute.ts';

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
  try {
    // RFC 3339 with an offset, as the compute API writes it (`2026-06-27T03:10:47.431-07:00`).
    const createdAt = cloudTime(creationTimestamp, `instance ${instance.name}'s creationTimestamp`);
    return createdAt ? { id, createdAt } : { id };
  } catch (err) {
    return err as UnavailableError;
  }
}
