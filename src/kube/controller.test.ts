import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { KubernetesObject } from '@kubernetes/client-node';
import { Counter, Registry } from 'prom-client';
import { FakeClock, settle } from '../testing/fake-clock.ts';
import { type ControllerOptions, type Reconciled, runController } from './controller.ts';
import { Informer, type WatchEventType } from './informer.ts';

interface Thing extends KubernetesObject {
  spec: { wanted: boolean; size: number };
}

/** A resource whose list the test fills and whose watch stream the test writes events into. */
function fakeResource(initial: Thing[] = []) {
  let rv = 1;
  let emit: ((type: WatchEventType, object: unknown) => void) | undefined;
  const informer = new Informer<Thing>({
    name: 'things',
    path: '/things',
    list: async () => ({ items: initial, metadata: { resourceVersion: String(rv) } }),
    watch: async (_path, _params, onEvent, onDone) => {
      emit = onEvent;
      return { abort: () => onDone() };
    },
  });
  const put = (name: string, spec: Thing['spec'], type: WatchEventType = 'MODIFIED') =>
    emit?.(type, { metadata: { name, resourceVersion: String(++rv) }, spec });
  return {
    informer,
    add: (name: string, spec: Thing['spec']) => put(name, spec, 'ADDED'),
    update: (name: string, spec: Thing['spec']) => put(name, spec),
  };
}

/** A reconcile the test completes by hand, recording each key it was called with. */
function controlledReconcile() {
  const calls: string[] = [];
  const running = new Map<string, (result: Reconciled | Error | undefined) => void>();
  const signals: AbortSignal[] = [];
  const reconcile = (key: string, signal: AbortSignal) =>
    new Promise<Reconciled | undefined>((resolve, reject) => {
      calls.push(key);
      signals.push(signal);
      running.set(key, (result) => {
        running.delete(key);
        if (result instanceof Error) reject(result);
        else resolve(result);
      });
    });
  return {
    reconcile,
    calls,
    signals,
    running,
    finish: async (key: string, result?: Reconciled | Error) => {
      const finish = running.get(key);
      assert.ok(finish, `${key} is being reconciled`);
      finish(result);
      await settle();
    },
  };
}

/**
 * Starts a controller over a fake resource listing `initial`, reconciling by hand; `stop` aborts it
 * and resolves when it has stopped.
 */
async function start(options: Partial<ControllerOptions<Thing>>, initial: Thing[] = []) {
  const resource = fakeResource(initial);
  const r = controlledReconcile();
  const abort = new AbortController();
  const run = runController(
    {
      name: 'things',
      informer: resource.informer,
      key: (thing) => thing.metadata?.name ?? '',
      reconcile: r.reconcile,
      ...options,
    },
    abort.signal,
  );
  assert.equal(await resource.informer.waitForSync(), true);
  await settle();
  return {
    resource,
    r,
    stop: async () => {
      abort.abort();
      await run;
    },
  };
}

/** A reconcile counter on a registry of its own. */
function reconcileCounter() {
  const registry = new Registry();
  const reconciles = new Counter({
    name: 'things_reconciles_total',
    help: 'Reconciles by result.',
    labelNames: ['result'],
    registers: [registry],
  });
  return { registry, reconciles };
}

async function counted(registry: Registry, result: string): Promise<number | undefined> {
  const data = await registry.getSingleMetric('things_reconciles_total')?.get();
  return data?.values.find((v) => v.labels['result'] === result)?.value;
}

describe('controller runner', () => {
  test('listed and watched objects that pass the filter queue their keys; updates see the old object', async () => {
    const updates: [number, number][] = [];
    const controller = await start(
      {
        concurrency: 4,
        filter: (thing, before) => {
          if (before) updates.push([before.spec.size, thing.spec.size]);
          return thing.spec.wanted;
        },
      },
      [{ metadata: { name: 'listed', resourceVersion: '1' }, spec: { wanted: true, size: 1 } }],
    );
    const { resource, r } = controller;
    assert.deepEqual(r.calls, ['listed']);
    resource.add('added', { wanted: true, size: 1 });
    resource.add('ignored', { wanted: false, size: 1 });
    resource.update('listed', { wanted: true, size: 2 });
    await settle();
    assert.deepEqual(r.calls, ['listed', 'added']);
    assert.deepEqual(updates, [[1, 2]]);
    await r.finish('listed');
    assert.deepEqual(r.calls, ['listed', 'added', 'listed'], 'the update during the reconcile runs it again');
    await r.finish('added');
    await r.finish('listed');
    await controller.stop();
  });

  test('a key queued many times while waiting is reconciled once, never twice at the same time', async () => {
    const controller = await start({ concurrency: 1 });
    const { resource, r } = controller;
    resource.add('busy', { wanted: true, size: 0 });
    for (let size = 0; size < 5; size++) resource.add(`k${size % 2}`, { wanted: true, size });
    await settle();
    assert.deepEqual(r.calls, ['busy']);
    await r.finish('busy');
    assert.deepEqual(r.calls, ['busy', 'k0']);
    await r.finish('k0');
    await r.finish('k1');
    assert.deepEqual(r.calls, ['busy', 'k0', 'k1']);
    await controller.stop();
  });

  test('other sources queue records through the filter, and are stopped with the controller', async () => {
    let enqueue: ((thing: Thing) => void) | undefined;
    let stopped = false;
    const controller = await start({
      filter: (thing) => thing.spec.wanted,
      watch: (queue) => {
        enqueue = queue;
        return () => (stopped = true);
      },
    });
    const { r } = controller;
    enqueue?.({ metadata: { name: 'from-elsewhere' }, spec: { wanted: true, size: 0 } });
    enqueue?.({ metadata: { name: 'filtered' }, spec: { wanted: false, size: 0 } });
    await settle();
    assert.deepEqual(r.calls, ['from-elsewhere']);
    await r.finish('from-elsewhere');
    await controller.stop();
    assert.equal(stopped, true);
  });

  test('a reconcile asking to be requeued runs again after exactly that delay, and is counted by outcome', async () => {
    const clock = new FakeClock();
    const { registry, reconciles } = reconcileCounter();
    const controller = await start({ clock, reconciles });
    const { resource, r } = controller;
    resource.add('refused', { wanted: true, size: 0 });
    await settle();
    await r.finish('refused', { outcome: 'rejected', requeueAfterMs: 60_000 });
    assert.equal(await counted(registry, 'rejected'), 1);
    await clock.advance(59_999);
    assert.deepEqual(r.calls, ['refused']);
    await clock.advance(1);
    assert.deepEqual(r.calls, ['refused', 'refused']);
    await r.finish('refused');
    assert.equal(await counted(registry, 'success'), 1, 'no outcome counts as success');
    await clock.advance(600_000);
    assert.equal(r.calls.length, 2, 'a plain success is not requeued');
    await controller.stop();
  });

  test('a failing reconcile is retried with the queue backoff, counted as an error, and forgotten on success', async () => {
    const clock = new FakeClock();
    const { registry, reconciles } = reconcileCounter();
    const controller = await start({ clock, reconciles, baseDelayMs: 100, maxDelayMs: 250 });
    const { resource, r } = controller;
    resource.add('flaky', { wanted: true, size: 0 });
    await settle();
    for (const delay of [100, 200, 250]) {
      await r.finish('flaky', new Error('the cloud is down'));
      const calls = r.calls.length;
      await clock.advance(delay - 1);
      assert.equal(r.calls.length, calls, `not retried before ${delay} ms`);
      await clock.advance(1);
      assert.equal(r.calls.length, calls + 1, `retried after ${delay} ms`);
    }
    assert.equal(await counted(registry, 'error'), 3);
    await r.finish('flaky');
    resource.update('flaky', { wanted: true, size: 1 });
    await settle();
    await r.finish('flaky', new Error('down again'));
    const calls = r.calls.length;
    await clock.advance(100);
    assert.equal(r.calls.length, calls + 1, 'after a success the backoff starts from the base again');
    await r.finish('flaky');
    await controller.stop();
  });

  test('keys back after a re-check or a retry are handed to onQueue as they come due, all at once, though reconciled one by one', async () => {
    const clock = new FakeClock();
    const queued: [string, number][] = [];
    const controller = await start({
      clock,
      baseDelayMs: 1_000,
      onQueue: (thing) => queued.push([thing.metadata?.name ?? '', clock.monotonic()]),
    });
    const { resource, r } = controller;
    for (const name of ['refused-1', 'refused-2', 'flaky']) resource.add(name, { wanted: true, size: 0 });
    await settle();
    await r.finish('refused-1', { outcome: 'rejected', requeueAfterMs: 1_000 });
    await r.finish('refused-2', { outcome: 'rejected', requeueAfterMs: 1_000 });
    await r.finish('flaky', new Error('the cloud is down'));
    queued.length = 0;
    await clock.advance(1_000);
    assert.deepEqual(queued, [
      ['refused-1', 1_000],
      ['refused-2', 1_000],
      ['flaky', 1_000],
    ]);
    assert.deepEqual(r.calls.slice(3), ['refused-1'], 'one reconcile at a time (the default)');
    await r.finish('refused-1');
    await r.finish('refused-2');
    await r.finish('flaky');
    await controller.stop();
  });

  test('stop aborts the reconciles in progress, waits for them, drops what is queued and stops the informer', async () => {
    // One key at a time (the default): the second waits in the queue.
    const controller = await start({});
    const { resource, r } = controller;
    for (const name of ['running', 'waiting']) resource.add(name, { wanted: true, size: 0 });
    await settle();
    let stopped = false;
    const stopping = controller.stop().then(() => (stopped = true));
    await settle();
    assert.equal(r.signals[0]?.aborted, true, 'the reconcile in progress is told to stop');
    assert.equal(stopped, false, 'stop waits for the reconcile in progress');
    await r.finish('running');
    await stopping;
    assert.deepEqual(r.calls, ['running'], 'the queued key is dropped');
    resource.add('late', { wanted: true, size: 0 });
    await settle();
    assert.deepEqual(r.calls, ['running']);
  });
});
