import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { KopsError } from '../../errors.ts';
import { applyJsonPatch, applyMergePatch, applyStrategicMergePatch } from './patch.ts';

const node = {
  metadata: { name: 'n', labels: { a: '1', b: '2' }, finalizers: ['x'] },
  spec: { taints: [{ key: 't1', effect: 'NoSchedule' }] },
  status: {
    conditions: [
      { type: 'Ready', status: 'True' },
      { type: 'MemoryPressure', status: 'False' },
    ],
  },
};

describe('JSON patch', () => {
  test('applies add, remove, replace, move, copy and test', () => {
    const out = applyJsonPatch(node, [
      { op: 'test', path: '/metadata/name', value: 'n' },
      { op: 'add', path: '/metadata/labels/c~1d', value: '3' },
      { op: 'remove', path: '/metadata/labels/a' },
      { op: 'replace', path: '/status/conditions/0/status', value: 'False' },
      { op: 'copy', from: '/metadata/labels/b', path: '/metadata/labels/e' },
      { op: 'move', from: '/metadata/labels/e', path: '/metadata/labels/f' },
      { op: 'add', path: '/spec/taints/-', value: { key: 't2', effect: 'NoExecute' } },
    ]) as typeof node;
    assert.deepEqual(out.metadata.labels, { b: '2', 'c/d': '3', f: '2' });
    assert.equal(out.status.conditions[0]?.status, 'False');
    assert.equal(out.spec.taints.length, 2);
    assert.equal(node.metadata.labels.a, '1', 'the input is untouched');
  });

  test('a failed test or a missing path is a 422, a malformed patch a 400', () => {
    const statusCode = (fn: () => unknown) => {
      try {
        fn();
      } catch (err) {
        assert.ok(err instanceof KopsError);
        const status = err.details?.['status'] as { code: number } | undefined;
        return status?.code;
      }
      return 0;
    };
    assert.equal(
      statusCode(() => applyJsonPatch(node, [{ op: 'test', path: '/metadata/name', value: 'x' }])),
      422,
    );
    assert.equal(
      statusCode(() => applyJsonPatch(node, [{ op: 'replace', path: '/nope/deeper', value: 1 }])),
      422,
    );
    assert.equal(
      statusCode(() => applyJsonPatch(node, { op: 'add' })),
      400,
    );
    assert.equal(
      statusCode(() => applyJsonPatch(node, [{ op: 'frobnicate', path: '/a' }])),
      400,
    );
  });
});

describe('merge patch', () => {
  test('merges objects, deletes on null and replaces lists', () => {
    const out = applyMergePatch(node, {
      metadata: { labels: { a: null, c: '3' } },
      status: { conditions: [{ type: 'Ready', status: 'False' }] },
    }) as typeof node;
    assert.deepEqual(out.metadata.labels, { b: '2', c: '3' });
    assert.deepEqual(out.status.conditions, [{ type: 'Ready', status: 'False' }]);
  });

  test('patching with itself changes nothing (property)', () => {
    const json = fc.jsonValue();
    fc.assert(
      fc.property(fc.dictionary(fc.string(), json), (doc) => {
        const clean = JSON.parse(JSON.stringify(doc));
        assert.deepEqual(applyMergePatch(clean, {}), clean);
      }),
    );
  });
});

describe('strategic merge patch', () => {
  test('merges conditions by type, replaces taints, unions finalizers', () => {
    const out = applyStrategicMergePatch(
      node,
      {
        metadata: { labels: { b: null }, finalizers: ['y'] },
        spec: { taints: [{ key: 't3', effect: 'NoSchedule' }] },
        status: {
          conditions: [
            { type: 'MemoryPressure', status: 'True' },
            { type: 'DiskPressure', status: 'False' },
          ],
        },
      },
      'Node',
    ) as typeof node;
    assert.deepEqual(out.metadata.labels, { a: '1' });
    assert.deepEqual(out.metadata.finalizers, ['x', 'y']);
    assert.deepEqual(out.spec.taints, [{ key: 't3', effect: 'NoSchedule' }]);
    assert.deepEqual(
      out.status.conditions.map((c) => `${c.type}=${c.status}`),
      ['Ready=True', 'MemoryPressure=True', 'DiskPressure=False'],
    );
  });

  test('honours $patch delete and replace, $deleteFromPrimitiveList and ignores $setElementOrder', () => {
    const out = applyStrategicMergePatch(
      node,
      {
        metadata: { labels: { $patch: 'replace', only: 'this' }, $deleteFromPrimitiveList: undefined },
        $setElementOrder: undefined,
        status: {
          conditions: [{ type: 'Ready', $patch: 'delete' }],
          '$setElementOrder/conditions': [{ type: 'Ready' }],
        },
      },
      'Node',
    ) as typeof node;
    assert.deepEqual(out.metadata.labels, { only: 'this' });
    assert.deepEqual(out.status.conditions, [{ type: 'MemoryPressure', status: 'False' }]);
    const removed = applyStrategicMergePatch(
      node,
      { metadata: { '$deleteFromPrimitiveList/finalizers': ['x'] } },
      'Node',
    ) as typeof node;
    assert.deepEqual(removed.metadata.finalizers, []);
  });

  test('requires the merge key in merged list items', () => {
    assert.throws(
      () => applyStrategicMergePatch(node, { status: { conditions: [{ status: 'True' }] } }, 'Node'),
      KopsError,
    );
  });
});
