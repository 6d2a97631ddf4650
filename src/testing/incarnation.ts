/** Test support: what a machine re-created under its name must look like to the node identity. */
import assert from 'node:assert/strict';
import type { NodeIdentity } from '../cloud/types.ts';

/**
 * `after` (the machine re-created under the name) bears the name `before` bore (its Hostname), and
 * is another incarnation: another id, created later.
 */
export function assertAnotherIncarnation(before: NodeIdentity, after: NodeIdentity): void {
  const hostname = (identity: NodeIdentity) => identity.addresses.find((a) => a.type === 'Hostname');
  assert.deepEqual(hostname(after), hostname(before));
  assert.notEqual(after.incarnation?.id, before.incarnation?.id);
  assert.ok((after.incarnation?.createdAt?.getTime() ?? 0) > (before.incarnation?.createdAt?.getTime() ?? 0));
}
