import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { managedLabelsAnnotation } from './diff-labels.ts';
import {
  isEmptyPlan,
  type LabelledNode,
  managedLabelsSignatureAnnotation,
  planNodeLabels,
  signManagedLabels,
  verifyManagedLabels,
} from './signed-managed-labels.ts';

const key = randomBytes(32);
const node = { name: 'i-0123456789abcdef0', uid: '6b1f0f6e-2d1c-4f7e-9a55-0c1d2e3f4a5b' };
const protectedLabel = 'node-restriction.kubernetes.io/dedicated';
const desired = { 'kops.k8s.io/instancegroup': 'nodes', 'node-role.kubernetes.io/node': '' };

/** A node the controller labelled with `desired` and signed, then changed by `change`. */
function labelled(change: Partial<LabelledNode> = {}): LabelledNode {
  const keys = Object.keys(desired).sort();
  return {
    ...node,
    labels: { ...desired, [protectedLabel]: 'secure' },
    managedLabels: keys.join(','),
    managedLabelsSignature: signManagedLabels(key, node, keys),
    ...change,
  };
}

describe('verifyManagedLabels', () => {
  test('a set the controller signed for this node is trusted, in any order', () => {
    const signature = signManagedLabels(key, node, ['b', 'a']);
    assert.match(signature, /^v1:[A-Za-z0-9_-]{43}$/);
    assert.deepEqual(verifyManagedLabels(key, node, 'a,b', signature), {
      trust: 'verified',
      keys: ['a', 'b'],
    });
    assert.deepEqual(verifyManagedLabels(key, node, 'b,a', signature), {
      trust: 'verified',
      keys: ['a', 'b'],
    });
  });

  test('a key added to the set, another node’s name or UID, or another signing key: nothing trusted', () => {
    const signature = signManagedLabels(key, node, ['a']);
    const untrusted = { trust: 'invalid', keys: [] };
    assert.deepEqual(verifyManagedLabels(key, node, `a,${protectedLabel}`, signature), untrusted);
    assert.deepEqual(verifyManagedLabels(key, { ...node, name: 'i-other' }, 'a', signature), untrusted);
    assert.deepEqual(verifyManagedLabels(key, { ...node, uid: 'recreated' }, 'a', signature), untrusted);
    assert.deepEqual(verifyManagedLabels(randomBytes(32), node, 'a', signature), untrusted);
  });

  test('no signature: an absent annotation manages nothing, a present one is unsigned; garbage is invalid', () => {
    assert.deepEqual(verifyManagedLabels(key, node, undefined, undefined), { trust: 'absent', keys: [] });
    assert.deepEqual(verifyManagedLabels(key, node, 'a,b', undefined), { trust: 'unsigned', keys: [] });
    for (const garbage of [
      '',
      'v1:',
      'v2:AAAA',
      'v1:!!!',
      'v1:AAAA',
      `v1:${'A'.repeat(44)}`,
      'x'.repeat(10_000),
    ]) {
      assert.deepEqual(verifyManagedLabels(key, node, 'a', garbage), { trust: 'invalid', keys: [] }, garbage);
    }
  });

  test('property: no other set verifies under a signature', () => {
    const labelKey = fc.constantFrom('a', 'b', 'c', protectedLabel, 'node-role.kubernetes.io/node');
    fc.assert(
      fc.property(fc.uniqueArray(labelKey), fc.uniqueArray(labelKey), (signed, claimed) => {
        const result = verifyManagedLabels(
          key,
          node,
          claimed.join(','),
          signManagedLabels(key, node, signed),
        );
        const same =
          new Set(signed).size === new Set(claimed).size && claimed.every((k) => signed.includes(k));
        assert.equal(result.trust, same ? 'verified' : 'invalid');
      }),
    );
  });
});

describe('planNodeLabels', () => {
  test('a key a node forges into its managed-labels annotation is not pruned; the set is signed again', () => {
    // The auditor's reproduction (tmp/audit-pki/managed-labels-forgery.test.ts), at the decision itself.
    const forged = labelled({ managedLabels: `${Object.keys(desired).sort().join(',')},${protectedLabel}` });
    const plan = planNodeLabels(forged, desired, key);
    assert.equal(plan.trust, 'invalid');
    assert.deepEqual(plan.remove, []);
    assert.deepEqual(plan.annotations, {
      [managedLabelsAnnotation]: Object.keys(desired).sort().join(','),
      [managedLabelsSignatureAnnotation]: signManagedLabels(key, node, Object.keys(desired)),
    });
  });

  test('an annotation copied from another node, signature and all, is not trusted', () => {
    const other = { name: 'i-other', uid: 'other-uid' };
    const copied = labelled({
      managedLabels: protectedLabel,
      managedLabelsSignature: signManagedLabels(key, other, [protectedLabel]),
    });
    const plan = planNodeLabels(copied, desired, key);
    assert.equal(plan.trust, 'invalid');
    assert.deepEqual(plan.remove, []);
  });

  test('an unsigned (pre-signature) annotation prunes nothing and is rewritten signed, listing the desired keys', () => {
    const legacy = labelled({
      managedLabels: `${protectedLabel},kops.k8s.io/instancegroup`,
      managedLabelsSignature: undefined,
    });
    const plan = planNodeLabels(legacy, desired, key);
    assert.equal(plan.trust, 'unsigned');
    assert.deepEqual(plan.remove, []);
    assert.deepEqual(plan.set, {});
    assert.equal(
      plan.annotations?.[managedLabelsAnnotation],
      'kops.k8s.io/instancegroup,node-role.kubernetes.io/node',
    );
    assert.ok(!isEmptyPlan(plan));
    // Once written, it is trusted and nothing is left to do.
    const written = plan.annotations ?? {};
    const signed = labelled({
      managedLabels: written[managedLabelsAnnotation],
      managedLabelsSignature: written[managedLabelsSignatureAnnotation],
    });
    assert.ok(isEmptyPlan(planNodeLabels(signed, desired, key)));
  });

  test('a label the instance group no longer declares is pruned when the signed set lists it', () => {
    const keys = [...Object.keys(desired), 'example.com/tier'].sort();
    const before = labelled({
      labels: { ...desired, 'example.com/tier': 'gold', [protectedLabel]: 'secure' },
      managedLabels: keys.join(','),
      managedLabelsSignature: signManagedLabels(key, node, keys),
    });
    const plan = planNodeLabels(before, desired, key);
    assert.equal(plan.trust, 'verified');
    assert.deepEqual(plan.remove, ['example.com/tier']);
    assert.deepEqual(plan.managed, Object.keys(desired).sort());
  });

  test('without a key: labels are added, only role labels pruned, the annotations left as they are', () => {
    const keys = [...Object.keys(desired), 'example.com/tier'].sort();
    const before = labelled({
      labels: { 'example.com/tier': 'gold', 'node-role.kubernetes.io/control-plane': '' },
      managedLabels: keys.join(','),
      managedLabelsSignature: signManagedLabels(key, node, keys),
    });
    const plan = planNodeLabels(before, desired, undefined);
    assert.equal(plan.trust, 'no-key');
    assert.deepEqual(plan.set, desired);
    assert.deepEqual(plan.remove, ['node-role.kubernetes.io/control-plane']);
    assert.equal(plan.annotations, undefined);
  });

  test('keys the controller recorded itself (set without a key) are pruned once there is one', () => {
    const before = labelled({ labels: { ...desired, 'example.com/tier': 'gold' } });
    const plan = planNodeLabels(before, desired, key, ['example.com/tier']);
    assert.deepEqual(plan.remove, ['example.com/tier']);
  });
});
