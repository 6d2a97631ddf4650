import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { V1Pod } from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import { InternalError } from '../errors.ts';
import { FakeClock } from '../testing/fake-clock.ts';
import { FakeResource, until } from '../testing/fake-resource.ts';
import type { InformerCache } from './informer.ts';
import { SharedInformer } from './shared-informer.ts';

function sharedOver(resource: FakeResource, registry?: Registry): SharedInformer<V1Pod> {
  return new SharedInformer<V1Pod>({
    name: 'pods',
    path: '/api/v1/pods',
    list: resource.list,
    watch: resource.watch,
    clock: new FakeClock(),
    random: () => 0,
    ...(registry ? { registry } : {}),
  });
}

/** What a view's handlers saw, as lines. */
function follow<R>(view: InformerCache<R>, show: (record: R) => string, replay = false): string[] {
  const seen: string[] = [];
  view.addHandlers(
    {
      add: (r) => seen.push(`add ${show(r)}`),
      update: (b, a) => seen.push(`update ${show(b)} -> ${show(a)}`),
      delete: (r) => seen.push(`delete ${show(r)}`),
    },
    { replay },
  );
  return seen;
}

describe('shared informer', () => {
  test('one list and one watch serve every view, each with its own record of each object', async () => {
    const resource = new FakeResource();
    resource.put('a', 'Pending');
    resource.put('b', 'Running');
    const registry = new Registry();
    const shared = sharedOver(resource, registry);
    const phases = shared.view('phases', (pod) => pod.status?.phase ?? '');
    const nodes = shared.view('nodes', (pod) => ({ node: pod.spec?.nodeName }));
    const presence = shared.view('presence', () => true as const);
    const seenPhases = follow(phases, (p) => p);
    const seenNodes = follow(nodes, (r) => String(r.node));
    phases.start();
    nodes.start();
    presence.start();
    assert.equal(await presence.waitForSync(), true);
    await until(() => resource.watchers.size === 1);
    assert.equal(resource.listCalls.length, 1, 'one list for three views');
    assert.equal(resource.watchParams.length, 1, 'one watch for three views');
    assert.equal(phases.get('default/a'), 'Pending');
    assert.deepEqual(nodes.get('default/b'), { node: 'node-1' });
    assert.equal(presence.get('default/b'), true);
    assert.equal(presence.get('default/zz'), undefined);
    assert.deepEqual(phases.list().sort(), ['Pending', 'Running']);
    assert.equal(phases.size, 2);

    resource.put('a', 'Running');
    resource.remove('b');
    assert.deepEqual(seenPhases, [
      'add Pending',
      'add Running',
      'update Pending -> Running',
      'delete Running',
    ]);
    assert.deepEqual(seenNodes, ['add node-1', 'add node-1', 'update node-1 -> node-1', 'delete node-1']);
    // One set of informer metrics, named after the shared watch.
    assert.match(await registry.metrics(), /^informer_lists_total\{resource="pods",result="success"\} 1$/m);
    assert.match(await registry.metrics(), /^informer_cached_objects\{resource="pods"\} 1$/m);
    await Promise.all([phases.stop(), nodes.stop(), presence.stop()]);
    assert.equal(resource.watchers.size, 0, 'the last release stops the watch');
  });

  test('a transform that fails for one view hides the object from that view only, and only while it fails', async () => {
    const resource = new FakeResource();
    resource.put('a', 'Pending');
    resource.put('odd', 'Broken');
    const shared = sharedOver(resource);
    const strict = shared.view('strict', (pod) => {
      if (pod.status?.phase === 'Broken') throw new Error('cannot read this pod');
      return pod.status?.phase;
    });
    const all = shared.view('all', (pod) => pod.metadata?.name);
    const seen = follow(strict, (p) => String(p));
    strict.start();
    all.start();
    await strict.waitForSync();
    await until(() => resource.watchers.size === 1);
    assert.equal(strict.get('default/odd'), undefined);
    assert.deepEqual(strict.list(), ['Pending']);
    assert.deepEqual(all.list().sort(), ['a', 'odd'], 'the other view keeps the object');
    resource.put('odd', 'Running'); // readable now: an add for the strict view
    resource.put('a', 'Broken'); // unreadable now: a delete for it
    assert.deepEqual(seen, ['add Pending', 'add Running', 'delete Pending']);
    assert.deepEqual(all.list().sort(), ['a', 'odd']);
    await Promise.all([strict.stop(), all.stop()]);
  });

  test('the watch runs while anyone holds it; a hold after a full release resumes without a re-list', async () => {
    const resource = new FakeResource();
    resource.put('a', 'Pending');
    const shared = sharedOver(resource);
    const view = shared.view('phases', (pod) => pod.status?.phase);
    shared.start(); // the process's hold, as `run` keeps it
    view.start();
    await view.waitForSync();
    await until(() => resource.watchers.size === 1);
    await view.stop(); // a leadership term ends
    assert.equal(resource.watchers.size, 1, 'the process still holds the watch');
    resource.put('b', 'Pending');
    assert.equal(view.get('default/b'), 'Pending', 'the cache stays current between terms');
    view.start();
    view.start(); // idempotent: one hold per view
    await shared.stop();
    assert.equal(resource.watchers.size, 1, 'the view still holds it');
    await view.stop();
    await view.stop();
    assert.equal(resource.watchers.size, 0, 'released by everyone: stopped');
    resource.put('c', 'Pending'); // while nobody watches
    view.start();
    await until(() => resource.watchers.size === 1 && view.get('default/c') !== undefined);
    assert.equal(resource.listCalls.length, 1, 'resumed from its resourceVersion, not listed again');
    await view.stop();
  });

  test('close stops the watch whoever still holds it; holds and releases after it stay balanced', async () => {
    const resource = new FakeResource();
    resource.put('a', 'Pending');
    const shared = sharedOver(resource);
    const view = shared.view('phases', (pod) => pod.status?.phase);
    await view.stop(); // a release before any hold does nothing
    await shared.stop();
    shared.start();
    shared.start(); // the process's hold is one hold
    view.start(); // a consumer's hold, e.g. the guard's, left behind by a failed start
    await view.waitForSync();
    await until(() => resource.watchers.size === 1);
    await shared.close();
    assert.equal(resource.watchers.size, 0, 'closed although the view still held it');
    await view.stop(); // its late release does not go below zero
    view.start();
    await until(() => resource.watchers.size === 1);
    await view.stop();
    assert.equal(resource.watchers.size, 0);
  });

  test('views replay the cache to a consumer that subscribes after the sync, as a new leader does', async () => {
    const resource = new FakeResource();
    for (const name of ['a', 'b', 'c']) resource.put(name, 'Pending');
    const shared = sharedOver(resource);
    const view = shared.view('names', (pod) => pod.metadata?.name ?? '');
    shared.start();
    await view.waitForSync();
    assert.deepEqual(follow(view, (n) => n, true).sort(), ['add a', 'add b', 'add c']);
    assert.deepEqual(
      follow(view, (n) => n, false),
      [],
      'without replay, only what happens next',
    );
    await shared.stop();
  });

  test('a view added after the start is refused; with no view, start watches nothing and counts as synced', async () => {
    const resource = new FakeResource();
    const idle = sharedOver(resource);
    idle.start();
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(resource.listCalls.length, 0, 'no view, no list');
    assert.equal(idle.hasSynced(), true, 'nothing to list: a readiness check on it passes');
    await idle.stop();

    const shared = sharedOver(resource);
    const first = shared.view('first', () => 1);
    assert.equal(shared.hasSynced(), false);
    first.start();
    await first.waitForSync();
    assert.equal(shared.hasSynced(), true);
    assert.throws(() => shared.view('late', () => 2), InternalError);
    await first.stop();
  });
});
