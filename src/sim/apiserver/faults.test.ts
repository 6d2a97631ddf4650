import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { ApiException, CoreV1Api, Watch } from '@kubernetes/client-node';
import { InvalidInputError } from '../../errors.ts';
import { FaultInjector } from './faults.ts';
import { type SimApiServer, startApiServer } from './index.ts';

describe('FaultInjector', () => {
  test('fails exactly the next N matching requests', () => {
    const faults = new FaultInjector();
    faults.errors({ count: 2, status: 500, resource: 'nodes', verbs: ['list'] });
    assert.equal(faults.plan('pods', 'list').error, undefined);
    assert.equal(faults.plan('nodes', 'get').error, undefined);
    assert.equal(faults.plan('nodes', 'list').error?.kind, 'internal');
    assert.equal(faults.plan('nodes', 'list').error?.kind, 'internal');
    assert.equal(faults.plan('nodes', 'list').error, undefined);
  });

  test('a fault scoped to a namespace spares the same requests in other namespaces', () => {
    const faults = new FaultInjector();
    faults.errors({ count: 1, resource: 'configmaps', verbs: ['create'], namespace: 'kube-system' });
    assert.equal(faults.plan('configmaps', 'create', 'kube-public').error, undefined);
    assert.equal(faults.plan('configmaps', 'create', 'kube-system').error?.kind, 'unavailable');
    assert.equal(faults.plan('configmaps', 'create', 'kube-system').error, undefined);
  });

  test('draws rate-based failures from a seeded generator, so runs repeat', () => {
    const sample = () => {
      const faults = new FaultInjector();
      faults.seed(42);
      faults.errors({ rate: 0.3 });
      return Array.from({ length: 200 }, () => (faults.plan('nodes', 'get').error ? 1 : 0));
    };
    const first = sample();
    assert.deepEqual(sample(), first);
    const failures = first.reduce((a: number, b) => a + b, 0);
    assert.ok(failures > 30 && failures < 90, `30% of 200 should fail, got ${failures}`);
  });

  test('adds latency by scope and removes it with 0', () => {
    const faults = new FaultInjector();
    faults.latency(25, { resource: 'nodes' });
    assert.equal(faults.plan('nodes', 'get').latencyMs, 25);
    assert.equal(faults.plan('pods', 'get').latencyMs, 0);
    faults.latency(0, { resource: 'nodes' });
    assert.equal(faults.plan('nodes', 'get').latencyMs, 0);
  });

  test('forces 410 only on lists and watches, and reset clears everything', () => {
    const faults = new FaultInjector();
    faults.expireNext(1);
    assert.equal(faults.plan('nodes', 'get').expire, false);
    assert.equal(faults.plan('nodes', 'watch').expire, true);
    assert.equal(faults.plan('nodes', 'watch').expire, false);
    faults.expireNext(5);
    faults.errors({ rate: 1 });
    faults.reset();
    assert.deepEqual(faults.plan('nodes', 'list'), { latencyMs: 0, expire: false });
  });

  test('rejects meaningless error faults', () => {
    const faults = new FaultInjector();
    assert.throws(() => faults.errors({}), InvalidInputError);
    assert.throws(() => faults.errors({ rate: 2 }), InvalidInputError);
  });
});

describe('fault injection over the wire', () => {
  let sim: SimApiServer;
  let core: CoreV1Api;
  before(async () => {
    sim = await startApiServer();
    core = sim.kubeConfig().makeApiClient(CoreV1Api);
  });
  after(() => sim.close());

  test('answers 429 and 503 with Retry-After, then recovers', async () => {
    sim.faults.errors({ count: 1, status: 429, retryAfterSeconds: 7, resource: 'nodes' });
    const throttled = await core.listNode().catch((err: unknown) => err);
    assert.ok(throttled instanceof ApiException);
    assert.equal(throttled.code, 429);
    assert.equal(throttled.headers['retry-after'], '7');
    assert.equal(JSON.parse(throttled.body as string).reason, 'TooManyRequests');
    sim.faults.errors({ count: 1, status: 503 });
    const unavailable = await core.listNode().catch((err: unknown) => err);
    assert.ok(unavailable instanceof ApiException);
    assert.equal(unavailable.code, 503);
    assert.ok(Array.isArray((await core.listNode()).items));
  });

  test('afterCommit: the write is carried out, the client sees the error; reads are failed as usual', async () => {
    sim.faults.errors({
      count: 1,
      status: 503,
      afterCommit: true,
      resource: 'configmaps',
      verbs: ['create'],
    });
    const lost = await core
      .createNamespacedConfigMap({ namespace: 'default', body: { metadata: { name: 'committed' } } })
      .catch((err: unknown) => err);
    assert.ok(lost instanceof ApiException);
    assert.equal(lost.code, 503);
    const stored = await core.readNamespacedConfigMap({ name: 'committed', namespace: 'default' });
    assert.equal(stored.metadata?.name, 'committed', 'the create was committed');
    sim.faults.errors({ count: 1, status: 503, afterCommit: true, resource: 'configmaps', verbs: ['get'] });
    const read = await core
      .readNamespacedConfigMap({ name: 'committed', namespace: 'default' })
      .catch((err: unknown) => err);
    assert.ok(read instanceof ApiException, 'a read has nothing to commit: it just fails');
    assert.equal(read.code, 503);
  });

  test('latency delays but does not fail', async () => {
    sim.faults.latency(20);
    try {
      assert.ok(Array.isArray((await core.listNamespace()).items));
    } finally {
      sim.faults.latency(0);
    }
  });

  test('forces 410 on the next list', async () => {
    sim.faults.expireNext(1, { resource: 'nodes' });
    const gone = await core.listNode().catch((err: unknown) => err);
    assert.ok(gone instanceof ApiException);
    assert.equal(gone.code, 410);
    assert.equal(JSON.parse(gone.body as string).reason, 'Expired');
  });

  test('forces an in-stream 410 on the next watch, and drops open watches', async () => {
    const watch = new Watch(sim.kubeConfig());
    sim.faults.expireNext(1, { verbs: ['watch'] });
    const expired = await new Promise<{ type: string; code?: number }[]>((resolve) => {
      const events: { type: string; code?: number }[] = [];
      void watch.watch(
        '/api/v1/nodes',
        { resourceVersion: String(sim.store.resourceVersion) },
        (type, obj) => events.push({ type, code: obj.code }),
        () => resolve(events),
      );
    });
    assert.deepEqual(expired, [{ type: 'ERROR', code: 410 }]);

    let ended: () => void = () => undefined;
    const done = new Promise<void>((resolve) => {
      ended = resolve;
    });
    await watch.watch(
      '/api/v1/nodes',
      { resourceVersion: String(sim.store.resourceVersion) },
      () => undefined,
      () => ended(),
    );
    while (sim.faults.openWatches === 0) await new Promise((r) => setImmediate(r));
    assert.equal(sim.faults.dropWatches({ resource: 'nodes' }), 1);
    await done;
    assert.equal(sim.faults.openWatches, 0);
  });
});
