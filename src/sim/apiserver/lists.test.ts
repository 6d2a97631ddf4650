import assert from 'node:assert/strict';
import { test } from 'node:test';
import { GoneError, InvalidInputError, TimeoutError } from '../../errors.ts';
import { encodeContinue, fieldValue, listPage, objectFilterOf } from './lists.ts';
import type { KubeObject } from './objects.ts';
import { resourceTypeByName } from './resources.ts';
import { SimStore } from './store.ts';

const pods = resourceTypeByName('pods')!;
const pod = (name: string, namespace: string, phase = 'Running'): KubeObject => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name, namespace, labels: { app: name } },
  spec: { nodeName: 'n1', containers: [{ name: 'c', image: 'i' }] },
  status: { phase },
});

function seeded(): SimStore {
  const store = new SimStore();
  store.create({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'a' } });
  for (const name of ['p1', 'p2', 'p3']) store.create(pod(name, 'a'));
  store.create(pod('q1', 'default', 'Pending'));
  return store;
}

test('pages through one namespace at the first page resourceVersion', () => {
  const store = seeded();
  const all = objectFilterOf(pods, null, null);
  const first = listPage(store, pods, 'a', all, { limit: '2' });
  assert.deepEqual(
    first.items.map((e) => e.object.metadata.name),
    ['p1', 'p2'],
  );
  assert.equal(first.remainingItemCount, 1);
  store.delete('pods', 'a', 'p3');
  const second = listPage(store, pods, 'a', all, { limit: '2', continueToken: first.continueToken ?? null });
  assert.deepEqual(
    second.items.map((e) => e.object.metadata.name),
    ['p3'],
  );
  assert.equal(second.continueToken, undefined);
  assert.equal(second.resourceVersion, first.resourceVersion);
});

test('filters with field selectors across namespaces', () => {
  const store = seeded();
  const pending = listPage(store, pods, undefined, objectFilterOf(pods, null, 'status.phase=Pending'), {});
  assert.deepEqual(
    pending.items.map((e) => e.object.metadata.name),
    ['q1'],
  );
  const labelled = listPage(
    store,
    pods,
    undefined,
    objectFilterOf(pods, 'app in (p2,q1)', 'metadata.namespace!=default'),
    {},
  );
  assert.deepEqual(
    labelled.items.map((e) => e.object.metadata.name),
    ['p2'],
  );
});

test('honours resourceVersion semantics and refuses bad parameters', () => {
  const store = seeded();
  const all = objectFilterOf(pods, null, null);
  const any = listPage(store, pods, undefined, all, { resourceVersion: '0', limit: '1' });
  assert.equal(any.items.length, 4, 'resourceVersion=0 ignores limit');
  assert.throws(() => listPage(store, pods, undefined, all, { resourceVersion: '999' }), TimeoutError);
  assert.throws(
    () => listPage(store, pods, undefined, all, { resourceVersionMatch: 'Exact' }),
    InvalidInputError,
  );
  assert.throws(() => listPage(store, pods, undefined, all, { limit: 'ten' }), InvalidInputError);
  assert.throws(
    () => listPage(store, pods, undefined, all, { continueToken: 'garbage!' }),
    InvalidInputError,
  );
  const stale = encodeContinue(1, 'a/p1');
  store.compact();
  assert.throws(() => listPage(store, pods, undefined, all, { continueToken: stale }), GoneError);
  assert.throws(() => listPage(store, pods, undefined, all, { forceExpired: true }), GoneError);
});

test('reads field values as the API indexes them', () => {
  const node: KubeObject = { apiVersion: 'v1', kind: 'Node', metadata: { name: 'n' } };
  assert.equal(fieldValue(node, 'spec.unschedulable'), 'false');
  assert.equal(fieldValue({ ...node, source: { component: 'kubelet' } }, 'source'), 'kubelet');
  assert.equal(fieldValue(node, 'status.phase'), '');
});
