import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ConflictError, ForbiddenError, GoneError, InvalidInputError, NotFoundError } from '../../errors.ts';
import type { KubeObject } from './objects.ts';
import { type ResourceType, resourceTypeByName } from './resources.ts';
import { type ChangeEvent, SimStore } from './store.ts';

const nodes = resourceTypeByName('nodes')!;
const node = (name: string, labels: Record<string, string> = {}): KubeObject => ({
  apiVersion: 'v1',
  kind: 'Node',
  metadata: { name, labels },
});

describe('SimStore', () => {
  test('creates with generated metadata and a growing resourceVersion', () => {
    const store = new SimStore();
    const start = store.resourceVersion;
    const a = store.create(node('a'));
    const b = store.create(node('b'));
    assert.equal(Number(a.metadata.resourceVersion), start + 1);
    assert.equal(Number(b.metadata.resourceVersion), start + 2);
    assert.equal(a.metadata.generation, 1);
    assert.match(a.metadata.creationTimestamp ?? '', /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/);
    assert.deepEqual(
      store.list('nodes').map((n) => n.metadata.name),
      ['a', 'b'],
    );
  });

  test('hands out copies, never its own objects', () => {
    const store = new SimStore();
    const created = store.create(node('a'));
    created.metadata.labels = { changed: 'yes' };
    const read = store.get('nodes', undefined, 'a');
    assert.deepEqual(read?.metadata.labels, {});
  });

  test('rejects duplicates, stale updates, unknown types and invalid objects with typed errors', () => {
    const store = new SimStore();
    const a = store.create(node('a'));
    assert.throws(() => store.create(node('a')), ConflictError);
    store.mutate('nodes', undefined, 'a', (n) => {
      n.metadata.labels = { x: 'y' };
    });
    assert.throws(() => store.update(a), ConflictError);
    assert.throws(() => store.get('widgets', undefined, 'a'), InvalidInputError);
    assert.throws(() => store.create(node('UPPER')), InvalidInputError);
    assert.throws(() => store.create(node('a', { 'bad key!': 'v' })), InvalidInputError);
    assert.throws(() => store.delete('nodes', undefined, 'missing'), NotFoundError);
    assert.throws(
      () =>
        store.create({
          apiVersion: 'v1',
          kind: 'Pod',
          metadata: { name: 'p', namespace: 'missing' },
          spec: { containers: [{ name: 'c', image: 'i' }] },
        }),
      NotFoundError,
    );
  });

  test('bumps generation on spec changes only, and skips writes that change nothing', () => {
    const store = new SimStore();
    store.create(node('a'));
    const labelled = store.mutate('nodes', undefined, 'a', (n) => {
      n.metadata.labels = { x: 'y' };
    });
    assert.equal(labelled.metadata.generation, 1);
    const specced = store.mutate('nodes', undefined, 'a', (n) => {
      n['spec'] = { unschedulable: true };
    });
    assert.equal(specced.metadata.generation, 2);
    const same = store.update(specced);
    assert.equal(same.metadata.resourceVersion, specced.metadata.resourceVersion);
  });

  test('emits ADDED, MODIFIED and DELETED events synchronously', () => {
    const store = new SimStore();
    const seen: string[] = [];
    const stop = store.subscribe((e: ChangeEvent) =>
      seen.push(`${e.kind} ${e.entry.object.metadata.name} ${e.resourceVersion}`),
    );
    store.create(node('a'));
    store.mutate('nodes', undefined, 'a', (n) => {
      n.metadata.labels = { x: 'y' };
    });
    const deleted = store.delete('nodes', undefined, 'a');
    stop();
    store.create(node('b'));
    const rv = store.resourceVersion;
    assert.deepEqual(seen, [`ADDED a ${rv - 3}`, `MODIFIED a ${rv - 2}`, `DELETED a ${rv - 1}`]);
    assert.equal(deleted.metadata.resourceVersion, String(rv - 1));
  });

  test('delivers changes only to listeners of their type when a type is named', () => {
    const store = new SimStore();
    const seen: string[] = [];
    store.subscribe((e) => seen.push(`pods ${e.entry.object.metadata.name}`), 'pods');
    store.subscribe((e) => seen.push(`all ${e.entry.object.metadata.name}`));
    store.create(node('a'));
    assert.deepEqual(seen, ['all a']);
  });

  test('keeps objects with finalizers until the last finalizer is removed', () => {
    const store = new SimStore();
    store.create({ ...node('held'), metadata: { name: 'held', finalizers: ['example.com/hold'] } });
    const marked = store.delete('nodes', undefined, 'held');
    assert.ok(marked.metadata.deletionTimestamp);
    assert.ok(store.get('nodes', undefined, 'held'));
    store.mutate('nodes', undefined, 'held', (n) => {
      n.metadata.finalizers = [];
    });
    assert.equal(store.get('nodes', undefined, 'held'), undefined);
  });

  test('deleting a namespace deletes what is in it', () => {
    const store = new SimStore();
    store.create({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'team' } });
    store.create({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'c', namespace: 'team' } });
    store.delete('namespaces', undefined, 'team');
    assert.deepEqual(store.list('configmaps', 'team'), []);
    assert.throws(() => store.delete('namespaces', undefined, 'kube-system'), ForbiddenError);
  });

  test('reconstructs past snapshots from history and refuses compacted ones', () => {
    const store = new SimStore();
    store.create(node('a', { v: '1' }));
    const rv = store.resourceVersion;
    store.mutate('nodes', undefined, 'a', (n) => {
      n.metadata.labels = { v: '2' };
    });
    store.create(node('b'));
    store.delete('nodes', undefined, 'a');
    const past = store.snapshot(nodes, undefined, rv);
    assert.deepEqual(
      past.map((e) => [e.object.metadata.name, e.object.metadata.labels?.['v']]),
      [['a', '1']],
    );
    assert.equal(store.changesSince(rv).length, 3);
    store.compact();
    assert.throws(() => store.changesSince(rv), GoneError);
    assert.throws(() => store.snapshot(nodes, undefined, rv), GoneError);
  });

  test('trims history to its limit', () => {
    const store = new SimStore({ historyLimit: 10 });
    const start = store.resourceVersion;
    for (let i = 0; i < 30; i++) store.create(node(`n${i}`));
    assert.throws(() => store.changesSince(start), GoneError);
    assert.equal(store.changesSince(store.resourceVersion - 10).length, 10);
    store.historyLimit = 2;
    assert.throws(() => store.changesSince(store.resourceVersion - 3), GoneError);
  });

  test("a watch's window is its own resource's: other resources' churn does not expire it, its own does", () => {
    const store = new SimStore({ historyLimit: 10 });
    store.create(node('quiet'));
    const nodesAt = store.resourceVersion;
    const configMap = (name: string) => ({
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name, namespace: 'default' },
    });
    for (let i = 0; i < 30; i++) store.create(configMap(`churn-${i}`));
    assert.throws(() => store.changesSince(nodesAt), GoneError, 'the global history is gone');
    assert.deepEqual(store.changesSince(nodesAt, nodes), [], 'no Node change was dropped');
    store.create(node('moved'));
    const afterMove = store.changesSince(nodesAt, nodes);
    assert.deepEqual(
      afterMove.map((e) => e.entry.object.metadata.name),
      ['moved'],
    );
    for (let i = 0; i < 30; i++) store.create(configMap(`more-${i}`));
    assert.throws(
      () => store.changesSince(nodesAt, nodes),
      GoneError,
      'the Node change after it was dropped',
    );
    assert.deepEqual(store.changesSince(store.resourceVersion - 1, nodes), []);
    store.compact();
    assert.throws(
      () => store.changesSince(store.resourceVersion - 1, nodes),
      GoneError,
      'a compaction is global',
    );
  });

  test("the watch cache's version: a type's last change, or a later progress notification", () => {
    const store = new SimStore();
    const configMaps = resourceTypeByName('configmaps') as ResourceType;
    store.create(node('a'));
    const nodeChange = store.resourceVersion;
    store.create({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'c', namespace: 'default' } });
    assert.equal(store.watchCacheVersion(nodes), nodeChange);
    assert.equal(store.watchCacheVersion(configMaps), store.resourceVersion);
    store.create({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'd', namespace: 'default' } });
    store.notifyProgress('nodes');
    assert.equal(store.watchCacheVersion(nodes), store.resourceVersion);
    store.create({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'e', namespace: 'default' } });
    store.create(node('b'));
    assert.equal(store.watchCacheVersion(nodes), store.resourceVersion, 'a change of its own');
    store.create({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'f', namespace: 'default' } });
    store.notifyProgress();
    assert.equal(store.watchCacheVersion(nodes), store.resourceVersion, 'every type');
  });

  test('stamps the CSR requester only for API writes and normalizes timestamps', () => {
    const store = new SimStore();
    const lease = store.create({
      apiVersion: 'coordination.k8s.io/v1',
      kind: 'Lease',
      metadata: { name: 'l', namespace: 'default' },
      spec: { renewTime: '2026-01-02T03:04:05.123Z', acquireTime: '2026-01-02T03:04:05Z' },
    });
    assert.deepEqual(lease['spec'], {
      renewTime: '2026-01-02T03:04:05.123000Z',
      acquireTime: '2026-01-02T03:04:05.000000Z',
    });
    const created = store.create({
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name: 'old', creationTimestamp: '2020-01-01T00:00:00.500Z' },
    });
    assert.equal(created.metadata.creationTimestamp, '2020-01-01T00:00:00Z');
  });
});
