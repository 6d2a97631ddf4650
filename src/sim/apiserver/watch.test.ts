import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import type { ServerResponse } from 'node:http';
import { test } from 'node:test';
import { FaultInjector } from './faults.ts';
import { objectFilterOf } from './lists.ts';
import type { KubeObject } from './objects.ts';
import { resourceTypeByName } from './resources.ts';
import { SimStore } from './store.ts';
import { serveWatch, type WatchParams } from './watch.ts';

const nodes = resourceTypeByName('nodes')!;
const node = (name: string, labels: Record<string, string> = {}): KubeObject => ({
  apiVersion: 'v1',
  kind: 'Node',
  metadata: { name, labels },
});

/** A response that records what a watch writes. */
class Recorder extends EventEmitter {
  status = 0;
  text = '';
  ended = false;
  writeHead(status: number) {
    this.status = status;
    return this;
  }
  flushHeaders() {}
  write(chunk: string) {
    this.text += chunk;
    return true;
  }
  end(chunk?: string) {
    if (chunk) this.text += chunk;
    this.ended = true;
    this.emit('close');
    return this;
  }
  events() {
    return this.text
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { type: string; object: { metadata?: { name?: string }; code?: number } })
      .map((e) => `${e.type} ${e.object.metadata?.name ?? e.object.code}`);
  }
}

function watch(
  store: SimStore,
  faults: FaultInjector,
  params: Partial<WatchParams>,
  labelSelector?: string,
): Recorder {
  const res = new Recorder();
  serveWatch(
    {
      store,
      faults,
      type: nodes,
      namespace: undefined,
      filter: objectFilterOf(nodes, labelSelector ?? null, null),
      params: {
        resourceVersion: '',
        allowWatchBookmarks: false,
        sendInitialEvents: false,
        forceExpired: false,
        ...params,
      },
      bookmarkIntervalMs: 60_000,
      render: (entry) => entry.json,
    },
    res as unknown as ServerResponse,
  );
  return res;
}

test('starts with the current state, then streams selector transitions', () => {
  const store = new SimStore();
  const faults = new FaultInjector();
  store.create(node('a', { pool: 'x' }));
  store.create(node('b'));
  const res = watch(store, faults, {}, 'pool=x');
  store.mutate('nodes', undefined, 'b', (n) => {
    n.metadata.labels = { pool: 'x' };
  });
  store.mutate('nodes', undefined, 'a', (n) => {
    n.metadata.labels = { pool: 'y' };
  });
  store.delete('nodes', undefined, 'b');
  assert.equal(res.status, 200);
  assert.deepEqual(res.events(), ['ADDED a', 'ADDED b', 'DELETED a', 'DELETED b']);
  assert.equal(faults.dropWatches(), 1);
  assert.equal(res.ended, true);
  store.create(node('c', { pool: 'x' }));
  assert.deepEqual(res.events().length, 4, 'a dropped watch receives nothing more');
});

test('answers a too-old resourceVersion with an in-stream 410 and ends', () => {
  const store = new SimStore();
  store.create(node('a'));
  store.compact();
  store.create(node('b'));
  const res = watch(store, new FaultInjector(), { resourceVersion: '1' });
  assert.deepEqual(res.events(), ['ERROR 410']);
  assert.equal(res.ended, true);
  const forced = watch(store, new FaultInjector(), { forceExpired: true });
  assert.deepEqual(forced.events(), ['ERROR 410']);
});
