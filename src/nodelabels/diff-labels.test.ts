import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import {
  alwaysPrunedLabels,
  diffLabels,
  formatManagedLabels,
  isEmptyDiff,
  parseManagedLabels,
} from './diff-labels.ts';

describe('diffLabels', () => {
  test('sets missing and changed labels, leaves equal ones alone', () => {
    const diff = diffLabels({ a: '1', b: '2', other: 'x' }, { a: '1', b: '3', c: '' }, []);
    assert.deepEqual(diff, { set: { b: '3', c: '' }, remove: [], managed: ['a', 'b', 'c'] });
  });

  test('removes a previously managed label that is no longer desired', () => {
    const diff = diffLabels(
      { 'kops.k8s.io/instancegroup': 'nodes', 'example.com/team': 'a', 'set-by-admin': 'yes' },
      { 'kops.k8s.io/instancegroup': 'nodes' },
      ['kops.k8s.io/instancegroup', 'example.com/team'],
    );
    assert.deepEqual(diff.remove, ['example.com/team']);
    assert.deepEqual(diff.set, {});
  });

  test('never removes a label it did not manage, except the kops role labels', () => {
    const diff = diffLabels(
      { 'node-role.kubernetes.io/control-plane': '', 'set-by-admin': 'yes' },
      { 'node-role.kubernetes.io/node': '' },
      [],
    );
    assert.deepEqual(diff.remove, ['node-role.kubernetes.io/control-plane']);
    assert.deepEqual(diff.set, { 'node-role.kubernetes.io/node': '' });
  });

  test('a managed label that is desired again is kept, not removed', () => {
    const diff = diffLabels({ a: '1' }, { a: '1' }, ['a']);
    assert.ok(isEmptyDiff(diff));
  });

  test('property: applying the diff yields the desired labels and keeps every unmanaged one', () => {
    const key = fc.constantFrom('a', 'b', 'c', 'd', 'e', ...alwaysPrunedLabels);
    const labels = fc.dictionary(key, fc.constantFrom('', '1', '2'));
    fc.assert(
      fc.property(labels, labels, fc.uniqueArray(key), (current, desired, managed) => {
        const diff = diffLabels(current, desired, managed);
        const result: Record<string, string> = { ...current, ...diff.set };
        for (const k of diff.remove) delete result[k];
        for (const [k, v] of Object.entries(desired)) assert.equal(result[k], v);
        for (const k of Object.keys(current)) {
          const prunable = managed.includes(k) || alwaysPrunedLabels.includes(k);
          if (!prunable) assert.ok(k in result, `unmanaged ${k} kept`);
          if (prunable && !(k in desired)) assert.ok(!(k in result), `stale managed ${k} removed`);
        }
        // A second pass over the result has nothing left to do.
        assert.ok(isEmptyDiff(diffLabels(result, desired, diff.managed)));
      }),
    );
  });
});

describe('managed-labels annotation', () => {
  test('round-trips a set of keys, sorted and deduplicated', () => {
    const text = formatManagedLabels(['kops.k8s.io/instancegroup', 'a', 'a', 'node-role.kubernetes.io/node']);
    assert.equal(text, 'a,kops.k8s.io/instancegroup,node-role.kubernetes.io/node');
    assert.deepEqual(parseManagedLabels(text), [
      'a',
      'kops.k8s.io/instancegroup',
      'node-role.kubernetes.io/node',
    ]);
  });

  test('a missing or empty annotation is an empty set; stray commas and spaces are ignored', () => {
    assert.deepEqual(parseManagedLabels(undefined), []);
    assert.deepEqual(parseManagedLabels(''), []);
    assert.deepEqual(parseManagedLabels(' a, ,b,'), ['a', 'b']);
  });
});
