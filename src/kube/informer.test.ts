import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { CoreV1Api, KubeConfig, type V1Node, type V1Pod } from '@kubernetes/client-node';
import { AggregatorRegistry, Registry } from 'prom-client';
import { ForbiddenError, RateLimitedError, TimeoutError } from '../errors.ts';
import type { Logger } from '../log.ts';
import { startApiServer } from '../sim/apiserver/index.ts';
import { drained, startStalledProxy } from '../sim/egress-proxy.ts';
import { FakeClock } from '../testing/fake-clock.ts';
import { FakeResource, until } from '../testing/fake-resource.ts';
import { capturedLogger } from '../testing/log-capture.ts';
import { outcomeWithin, silentApiServer } from '../testing/silent-server.ts';
import { httpStatusOfApiError } from './api-errors.ts';
import { loadKubeConfig } from './client.ts';
import { Informer, kubeList, kubeWatch, type ListFn, maxWatchLineBytes, objectKey } from './informer.ts';
import { maxNodeBytes } from './kube-https.ts';

/** The slim record the tests cache instead of whole pods. */
interface PodRecord {
  key: string;
  phase: string | undefined;
  nodeName: string | undefined;
}
const slim = (pod: V1Pod): PodRecord => ({
  key: objectKey(pod),
  phase: pod.status?.phase,
  nodeName: pod.spec?.nodeName,
});

function startInformer(
  resource: FakeResource,
  clock: FakeClock,
  registry?: Registry,
  pageSize?: number,
  logger?: Logger,
) {
  const events: string[] = [];
  const informer = new Informer<V1Pod, PodRecord>({
    name: 'pods',
    path: '/api/v1/pods',
    list: resource.list,
    watch: resource.watch,
    transform: slim,
    labelSelector: 'app=web',
    pageSize,
    clock,
    registry,
    logger,
    random: () => 0,
  });
  informer.addHandlers({
    add: (r) => events.push(`add ${r.key} ${r.phase}`),
    update: (o, n) => events.push(`update ${n.key} ${o.phase}->${n.phase}`),
    delete: (r) => events.push(`delete ${r.key}`),
  });
  informer.start();
  return { informer, events };
}

describe('informer', () => {
  test('syncs from a paged list, caches slim records, then follows the watch', async () => {
    const resource = new FakeResource();
    for (const name of ['a', 'b', 'c', 'd', 'e']) resource.put(name, 'Pending');
    const clock = new FakeClock();
    const { informer, events } = startInformer(resource, clock, undefined, 2);
    assert.equal(informer.hasSynced(), false);
    assert.equal(await informer.waitForSync(), true);
    assert.equal(informer.hasSynced(), true);
    assert.deepEqual(
      resource.listCalls.map((c) => c._continue),
      [undefined, '2', '4'],
    );
    assert.ok(resource.listCalls.every((c) => c.labelSelector === 'app=web' && c.limit === 2));
    assert.equal(informer.size, 5);
    assert.deepEqual(informer.get('default/a'), { key: 'default/a', phase: 'Pending', nodeName: 'node-1' });
    assert.deepEqual(events.slice(0, 2), ['add default/a Pending', 'add default/b Pending']);

    await until(() => resource.watchers.size === 1);
    assert.equal(resource.watchParams[0]?.['allowWatchBookmarks'], true);
    assert.equal(resource.watchParams[0]?.['resourceVersion'], '105');
    assert.equal(resource.watchParams[0]?.['labelSelector'], 'app=web');
    events.length = 0;
    resource.put('f', 'Pending');
    resource.put('a', 'Running');
    resource.remove('b');
    assert.deepEqual(events, [
      'add default/f Pending',
      'update default/a Pending->Running',
      'delete default/b',
    ]);
    assert.deepEqual(informer.keys().sort(), [
      'default/a',
      'default/c',
      'default/d',
      'default/e',
      'default/f',
    ]);
    await informer.stop();
  });

  test('summed over serving workers, the cache gauges read as one cache, not one per process', async () => {
    // src/bootstrap/workers.ts sums the workers' registries with prom-client's aggregation.
    const resource = new FakeResource();
    for (const name of ['a', 'b', 'c']) resource.put(name, 'Pending');
    const started = [new Registry(), new Registry()].map((registry) => ({
      registry,
      ...startInformer(resource, new FakeClock(), registry),
    }));
    for (const { informer } of started) await informer.waitForSync();
    const summed = await AggregatorRegistry.aggregate(
      await Promise.all(started.map(({ registry }) => registry.getMetricsAsJSON())),
    ).metrics();
    assert.match(summed, /^informer_synced\{resource="pods"\} 1$/m);
    assert.match(summed, /^informer_cached_objects\{resource="pods"\} 3$/m);
    // Counters still add up: each process listed once.
    assert.match(summed, /^informer_lists_total\{resource="pods",result="success"\} 2$/m);
    for (const { informer } of started) await informer.stop();
  });

  test('a dropped watch resumes from the last resourceVersion without re-listing; bookmarks advance it', async () => {
    const resource = new FakeResource();
    resource.put('a', 'Pending');
    const clock = new FakeClock();
    const registry = new Registry();
    const { informer, events } = startInformer(resource, clock, registry);
    await informer.waitForSync();
    await until(() => resource.watchers.size === 1);
    resource.put('a', 'Running');
    resource.put('noise', 'Pending');
    resource.bookmark();
    assert.equal(informer.resourceVersion, '103');
    resource.dropWatches();
    resource.put('b', 'Pending'); // happens while no watch is open
    await until(() => resource.watchers.size === 1);
    assert.equal(resource.listCalls.length, 1, 'no re-list');
    assert.equal(resource.watchParams[1]?.['resourceVersion'], '103');
    assert.ok(events.includes('add default/b Pending'), 'the event missed while disconnected is replayed');
    assert.match(
      await registry.metrics(),
      /informer_watch_restarts_total\{resource="pods",reason="closed"\} 1/,
    );
    assert.match(await registry.metrics(), /informer_events_total\{resource="pods",type="bookmark"\} 1/);
    await informer.stop();
  });

  test('watchSilenceMs: unknown while no stream is open, then time since the open one was accepted or last delivered', async () => {
    const resource = new FakeResource();
    resource.put('a', 'Pending');
    const clock = new FakeClock();
    const { informer } = startInformer(resource, clock);
    assert.equal(informer.watchSilenceMs(), undefined, 'not even listed');
    await informer.waitForSync();
    await until(() => resource.watchers.size === 1);
    assert.equal(informer.watchSilenceMs(), undefined, 'just accepted: its first line may still be an error');
    await clock.advance(1_000);
    assert.equal(
      informer.watchSilenceMs(),
      1_000,
      'open a second since the accept: current as of the accept',
    );
    await clock.advance(4_000);
    assert.equal(informer.watchSilenceMs(), 5_000, 'a quiet stream proves nothing more as time goes by');
    resource.bookmark();
    assert.equal(informer.watchSilenceMs(), 0);
    await clock.advance(5_000);
    resource.put('b', 'Pending');
    assert.equal(informer.watchSilenceMs(), 0, 'an event is a sign of life too');
    resource.failWatchConnects = 1;
    resource.dropWatches();
    assert.equal(informer.watchSilenceMs(), undefined, 'no stream, no claim to be current');
    await clock.advance(1_000);
    assert.equal(informer.watchSilenceMs(), undefined, 'a refused watch is no claim either');
    await clock.advance(30_000);
    await until(() => resource.watchers.size === 1);
    await clock.advance(1_000);
    assert.equal(informer.watchSilenceMs(), 1_000, 'the new stream was accepted');
    await informer.stop();
    assert.equal(informer.watchSilenceMs(), undefined, 'stopped');
  });

  test('a stream accepted and then refused in its first line (a too-old resourceVersion: 200, then a 410 ERROR) is never current', async () => {
    const resource = new FakeResource();
    resource.put('a', 'Pending');
    const clock = new FakeClock();
    const { informer } = startInformer(resource, clock);
    await informer.waitForSync();
    await until(() => resource.watchers.size === 1);
    await clock.advance(50);
    assert.equal(informer.watchSilenceMs(), undefined, 'accepted 50 ms ago, nothing delivered yet');
    const [stream] = resource.watchers;
    resource.failLists = 1; // the re-list the 410 calls for fails once: no stream for a while
    stream?.onEvent('ERROR', { code: 410, message: 'too old resource version: 1 (5)' });
    await clock.advance(1_000);
    assert.equal(informer.watchSilenceMs(), undefined, 'the accept of a refused stream never counts');
    await informer.stop();
  });

  test('staleMs: time since the cache was last known current (a list, a watch the server accepted, an event); a refused watch does not count; the gauge follows', async () => {
    const resource = new FakeResource();
    resource.put('a', 'Pending');
    const clock = new FakeClock();
    const registry = new Registry();
    const { informer } = startInformer(resource, clock, registry);
    const gauge = async () =>
      /^informer_last_current_timestamp_seconds\{resource="pods"\} ([\d.]+)$/m.exec(
        await registry.metrics(),
      )?.[1];
    assert.equal(informer.staleMs(), undefined, 'not synced');
    await informer.waitForSync();
    await until(() => resource.watchers.size === 1);
    assert.equal(informer.staleMs(), 0, 'listed, and the watch accepted from its resourceVersion');
    assert.equal(Number(await gauge()), clock.now() / 1000);
    await clock.advance(40_000);
    assert.equal(informer.staleMs(), 40_000, 'a quiet stream proves nothing more as time goes by');
    resource.bookmark();
    assert.equal(informer.staleMs(), 0);
    // The watch is refused from now on (RBAC revoked, a failing webhook): nothing is current any more.
    resource.failWatchConnects = 1_000;
    resource.dropWatches();
    await clock.advance(60_000);
    assert.ok((informer.staleMs() ?? 0) >= 60_000, `${informer.staleMs()} ms`);
    resource.failWatchConnects = 0;
    await clock.advance(30_000);
    await until(() => resource.watchers.size === 1);
    assert.ok((informer.staleMs() ?? 0) >= 90_000, 'accepted again, not confirmed yet');
    await clock.advance(1_000);
    assert.equal(
      informer.staleMs(),
      1_000,
      'accepted a second ago, and still open: current as of the accept',
    );
    resource.put('b', 'Pending');
    assert.equal(Number(await gauge()), clock.now() / 1000);
    await informer.stop();
    assert.equal(informer.staleMs(), undefined, 'stopped: no claim either way');
    assert.equal(await gauge(), undefined, 'and no sample');
  });

  test('a watch the API server never answers is a failure (logged, backed off), not a quiet stream', async () => {
    const resource = new FakeResource();
    resource.put('a', 'Pending');
    const registry = new Registry();
    const { logger, lines } = capturedLogger();
    let attempts = 0;
    const informer = new Informer<V1Pod>({
      name: 'pods',
      path: '/api/v1/pods',
      list: resource.list,
      // The answer never comes: the idle timeout ends the request before the server accepted it.
      watch: async (path, _params, _onEvent, onDone) => {
        attempts++;
        setTimeout(() => onDone(new TimeoutError(`watch ${path}: nothing received for 90000 ms`)), 1);
        return { abort() {} };
      },
      backoff: { initialMs: 50, maxMs: 50 },
      registry,
      logger,
      random: () => 0,
    });
    informer.start();
    try {
      for (let i = 0; i < 100 && attempts < 3; i++) await new Promise((resolve) => setTimeout(resolve, 20));
      assert.ok(attempts >= 3, `${attempts} attempts`);
      assert.match(
        await registry.metrics(),
        /informer_watch_restarts_total\{resource="pods",reason="error"\} [2-9]/,
      );
      assert.doesNotMatch(await registry.metrics(), /reason="timeout"/);
      assert.ok(
        lines.some((line) => line.includes('list/watch failed') && line.includes('nothing received')),
      );
    } finally {
      await informer.stop();
    }
  });

  test('a caller of waitForSync that gives up is let go at once, however long the list keeps failing', async () => {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const resource = new FakeResource();
    resource.failLists = 1_000;
    const { informer } = startInformer(resource, new FakeClock());
    let collected = 0;
    const registry = new FinalizationRegistry(() => collected++);
    for (let i = 0; i < 100; i++) {
      const gaveUp = new AbortController();
      registry.register(gaveUp.signal, i);
      const waiting = informer.waitForSync(gaveUp.signal);
      gaveUp.abort();
      assert.equal(await waiting, false);
    }
    for (let round = 0; round < 10 && collected < 100; round++) {
      gc();
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    assert.ok(collected >= 95, `${collected} of 100 abandoned waits collected while the list still fails`);
    assert.equal(informer.hasSynced(), false);
    await informer.stop();
  });

  test('failed lists are retried with growing backoff until they succeed', async () => {
    const resource = new FakeResource();
    resource.put('a', 'Pending');
    resource.failLists = 3;
    const clock = new FakeClock();
    const registry = new Registry();
    const { informer } = startInformer(resource, clock, registry);
    const listTimes: number[] = [];
    const t0 = clock.now();
    for (let t = 0; t <= 8000; t += 100) {
      while (listTimes.length < resource.listCalls.length) listTimes.push(clock.now() - t0);
      await clock.advance(100);
    }
    assert.deepEqual(listTimes, [0, 1000, 3000, 7000], '1 s, 2 s, 4 s apart');
    assert.equal(informer.hasSynced(), true);
    assert.equal(informer.size, 1);
    const metrics = await registry.metrics();
    assert.match(metrics, /informer_lists_total\{resource="pods",result="error"\} 3/);
    assert.match(metrics, /informer_lists_total\{resource="pods",result="success"\} 1/);
    assert.match(metrics, /informer_synced\{resource="pods"\} 1/);
    assert.match(metrics, /informer_cached_objects\{resource="pods"\} 1/);
    await informer.stop();
  });

  test('a failure that lasts is logged when it starts and every ten minutes with the count held back; its end once', async () => {
    const resource = new FakeResource();
    resource.put('a', 'Pending');
    resource.failLists = 40; // 1, 2, 4, 8, 16 s, then 30 s apart: about 19 minutes
    const clock = new FakeClock();
    const { logger, lines } = capturedLogger();
    const { informer } = startInformer(resource, clock, undefined, undefined, logger);
    while (!informer.hasSynced()) await clock.advance(1000);
    const records = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    assert.deepEqual(
      records.map((r) => [r['level'], r['msg'], r['failures'], r['repeated']]),
      [
        ['warn', 'list/watch failed; retrying', 1, undefined],
        ['warn', 'list/watch failed; retrying', 25, 23], // at 601 s
        ['info', 'list/watch works again', 40, undefined],
      ],
    );
    assert.equal(records[0]?.['informer'], 'pods');
    await informer.stop();
  });

  test('a list answered with Retry-After waits at least that long, capped at the backoff’s longest delay', async () => {
    const resource = new FakeResource();
    resource.put('a', 'Pending');
    // Three 429s asking for 10 s (over the 1 s, 2 s, 4 s backoff), then one asking for 2 hours.
    const asked = [10, 10, 10, 7200];
    const clock = new FakeClock();
    const listTimes: number[] = [];
    const t0 = clock.now();
    const informer = new Informer<V1Pod, PodRecord>({
      name: 'pods',
      path: '/api/v1/pods',
      list: async (options) => {
        listTimes.push(clock.now() - t0);
        const seconds = asked.shift();
        if (seconds !== undefined) {
          throw new RateLimitedError('list pods: HTTP 429', {
            upstreamStatus: 429,
            retryAfterSeconds: seconds,
          });
        }
        return resource.list(options);
      },
      watch: resource.watch,
      transform: slim,
      clock,
      random: () => 0,
    });
    informer.start();
    try {
      for (let t = 0; t <= 70_000; t += 500) await clock.advance(500);
      assert.deepEqual(
        listTimes,
        [0, 10_000, 20_000, 30_000, 60_000],
        '10 s apart as asked, not 1 s, 2 s, 4 s; the 2-hour ask is cut to the 30 s cap',
      );
      assert.equal(informer.hasSynced(), true);
    } finally {
      await informer.stop();
    }
  });

  test('a refused watch is retried with backoff; success resets it', async () => {
    const resource = new FakeResource();
    const clock = new FakeClock();
    const registry = new Registry();
    const { informer, events } = startInformer(resource, clock, registry);
    await informer.waitForSync();
    await until(() => resource.watchers.size === 1);
    await clock.advance(5000); // a long-lived stream is healthy: its end is retried at once
    resource.failWatchConnects = 2;
    resource.dropWatches();
    await until(() => resource.watchParams.length === 2);
    await clock.advance(999);
    assert.equal(resource.watchParams.length, 2, 'second connect failed; waiting 1 s');
    await clock.advance(1);
    await until(() => resource.watchParams.length === 3);
    await clock.advance(1999);
    assert.equal(resource.watchParams.length, 3, 'third connect failed; waiting 2 s');
    await clock.advance(1);
    await until(() => resource.watchers.size === 1);
    assert.equal(resource.watchParams.length, 4);
    resource.put('late', 'Pending');
    assert.deepEqual(events, ['add default/late Pending']);
    assert.match(
      await registry.metrics(),
      /informer_watch_restarts_total\{resource="pods",reason="error"\} 2/,
    );
    await informer.stop();
  });

  for (const inStream of [true, false]) {
    test(`410 Gone ${inStream ? 'in the stream' : 'on reconnect'} re-lists and reports the difference`, async () => {
      const resource = new FakeResource();
      for (const name of ['keep', 'change', 'vanish']) resource.put(name, 'Pending');
      const clock = new FakeClock();
      const { informer, events } = startInformer(resource, clock);
      await informer.waitForSync();
      await until(() => resource.watchers.size === 1);
      await clock.advance(5000);
      events.length = 0;
      const [stream] = resource.detach();
      resource.put('change', 'Running');
      resource.remove('vanish');
      resource.put('new', 'Pending');
      resource.compact();
      if (inStream)
        stream!.onEvent('ERROR', { kind: 'Status', code: 410, message: 'too old resource version' });
      else resource.close(stream!);
      if (!inStream) {
        // The reconnect is gone at once, having served nothing: the re-list waits for the backoff
        // (1 s), so that a server answering 410 to every watch is not listed in a loop.
        await until(() => clock.pending > 0 && resource.watchParams.length === 2);
        assert.equal(resource.listCalls.length, 1, 'not re-listed before the backoff');
        await clock.advance(1000);
      }
      await until(() => resource.watchers.size === 1);
      assert.equal(resource.listCalls.length, 2, 're-listed');
      assert.equal(
        resource.watchParams.length,
        inStream ? 2 : 3,
        inStream ? 'watch, watch' : 'watch, 410, watch',
      );
      assert.deepEqual(events, [
        'delete default/vanish',
        'update default/change Pending->Running',
        'add default/new Pending',
      ]);
      assert.deepEqual(informer.keys().sort(), ['default/change', 'default/keep', 'default/new']);
      resource.put('after', 'Pending');
      assert.equal(events.at(-1), 'add default/after Pending', 'watching again');
      await informer.stop();
    });
  }

  test('a wall-clock step does not change how long the watch has been silent (measured on the monotonic clock)', async () => {
    const resource = new FakeResource();
    const clock = new FakeClock();
    const { informer } = startInformer(resource, clock);
    await informer.waitForSync();
    await until(() => resource.watchers.size === 1);
    resource.put('heard', 'Pending');
    await clock.advance(100_000);
    clock.stepWall(-3_600_000);
    assert.equal(informer.watchSilenceMs(), 100_000, 'silent for 100 s, whatever the wall clock says');
    clock.stepWall(7_200_000);
    assert.equal(informer.watchSilenceMs(), 100_000);
    await informer.stop();
  });

  test('stop ends the loop; waitForSync reports false when never synced', async () => {
    const resource = new FakeResource();
    resource.failLists = 100;
    const clock = new FakeClock();
    const { informer } = startInformer(resource, clock);
    const waiting = informer.waitForSync();
    await clock.advance(5000);
    await informer.stop();
    assert.equal(await waiting, false);
    const calls = resource.listCalls.length;
    await clock.advance(60_000);
    assert.equal(resource.listCalls.length, calls, 'no retries after stop');
  });

  test('started again after a stop, it resumes from its resourceVersion; a start during a stop is honoured', async () => {
    const resource = new FakeResource();
    resource.put('a', 'Pending');
    const clock = new FakeClock();
    const { informer, events } = startInformer(resource, clock);
    await informer.waitForSync();
    await until(() => resource.watchers.size === 1);
    await informer.stop();
    assert.equal(resource.watchers.size, 0);
    resource.put('b', 'Pending'); // while stopped
    assert.equal(informer.get('default/b'), undefined);
    informer.start();
    await until(() => resource.watchers.size === 1 && informer.get('default/b') !== undefined);
    assert.equal(resource.listCalls.length, 1, 'no re-list');
    assert.ok(events.includes('add default/b Pending'));
    // A stop and a start in the same turn: the start wins once the stop has ended.
    const stopping = informer.stop();
    informer.start();
    await stopping;
    await until(() => resource.watchers.size === 1);
    resource.put('c', 'Pending');
    assert.ok(events.includes('add default/c Pending'));
    await informer.stop();
    assert.equal(resource.watchers.size, 0);
  });

  test('a start while a stop is still ending: waitForSync resolves true once it syncs, not false', async () => {
    const resource = new FakeResource();
    resource.put('a', 'Pending');
    const { informer } = startInformer(resource, new FakeClock());
    const stopping = informer.stop(); // before its first list completed
    informer.start();
    const synced = informer.waitForSync();
    await stopping;
    assert.equal(await synced, true);
    assert.equal(informer.get('default/a')?.phase, 'Pending');
    await informer.stop();
    assert.equal(await informer.waitForSync(), true, 'synced once stays synced');
  });

  test('stop gives up a list page or a watch connect in flight at once, instead of waiting for an answer', async () => {
    // A page that never comes: only its signal (the informer's stop) ends it.
    const signals: (AbortSignal | undefined)[] = [];
    const hangingList: ListFn<V1Pod> = ({ signal }) => {
      signals.push(signal);
      return new Promise((_, reject) => signal?.addEventListener('abort', () => reject(signal.reason)));
    };
    const listing = new Informer<V1Pod>({
      name: 'pods',
      path: '/api/v1/pods',
      list: hangingList,
      watch: () => assert.fail('no watch before a list'),
    });
    listing.start();
    await until(() => signals.length === 1);
    assert.deepEqual(await outcomeWithin(listing.stop(), 1_000), { pending: false, value: undefined });
    assert.equal(signals[0]?.aborted, true, 'the page was given the stop signal');

    // A watch still connecting: client-node's Watch hands over its handle only once the server answers.
    const resource = new FakeResource();
    let connect: ((handle: { abort(): void }) => void) | undefined;
    let aborted = false;
    const connecting = new Informer<V1Pod>({
      name: 'pods',
      path: '/api/v1/pods',
      list: resource.list,
      watch: () => new Promise((resolve) => (connect = resolve)),
    });
    connecting.start();
    await until(() => connect !== undefined);
    assert.deepEqual(await outcomeWithin(connecting.stop(), 1_000), { pending: false, value: undefined });
    // When the connect completes after all, the stream is closed at once.
    connect?.({ abort: () => (aborted = true) });
    await until(() => aborted);
  });

  test('built but never started, it publishes no informer_synced sample; started, 0 until synced', async () => {
    const resource = new FakeResource();
    const registry = new Registry();
    const informer = new Informer<V1Pod, PodRecord>({
      name: 'idle',
      path: '/api/v1/pods',
      list: resource.list,
      watch: resource.watch,
      transform: slim,
      registry,
    });
    assert.doesNotMatch(await registry.metrics(), /informer_synced\{resource="idle"\}/);
    resource.failLists = 1;
    informer.start();
    assert.match(await registry.metrics(), /^informer_synced\{resource="idle"\} 0$/m);
    await informer.stop();
  });

  test('a handler subscribing with replay gets the cached records as adds first; without, only what follows', async () => {
    const resource = new FakeResource();
    for (const name of ['a', 'b']) resource.put(name, 'Pending');
    const { informer } = startInformer(resource, new FakeClock());
    await informer.waitForSync();
    const replayed: string[] = [];
    const later: string[] = [];
    informer.addHandlers({ add: (r) => replayed.push(r.key) }, { replay: true });
    informer.addHandlers({ add: (r) => later.push(r.key) });
    assert.deepEqual(replayed.sort(), ['default/a', 'default/b']);
    assert.deepEqual(later, []);
    await until(() => resource.watchers.size === 1);
    resource.put('c', 'Pending');
    assert.deepEqual(later, ['default/c']);
    assert.equal(replayed.length, 3);
    await informer.stop();
  });
});

describe('informer against the simulated API server', () => {
  /** Polls (in real time) until `condition` holds; fails after 10 s instead of hanging. */
  async function eventually(condition: () => boolean | Promise<boolean>, what: string): Promise<void> {
    for (let i = 0; i < 1000; i++) {
      if (await condition()) return;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    assert.fail(`timed out waiting for ${what}`);
  }

  interface NodeRecord {
    name: string;
    ready: boolean;
    instanceGroup: string | undefined;
  }
  const slimNode = (node: V1Node): NodeRecord => ({
    name: node.metadata?.name ?? '',
    ready: node.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false,
    instanceGroup: node.metadata?.labels?.['kops.k8s.io/instancegroup'],
  });
  const node = (name: string, ig: string, ready = true) => ({
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name, labels: { 'kops.k8s.io/instancegroup': ig } },
    status: {
      conditions: [{ type: 'Ready', status: ready ? 'True' : 'False' }],
      nodeInfo: { kubeletVersion: 'v1.33.0' },
    },
  });

  /** Options of `setup`: `decoded` lists through client-node's typed API instead of {@link kubeList}. */
  async function setup(options: { labelSelector?: string; decoded?: boolean } = {}) {
    const sim = await startApiServer();
    const kubeConfig = sim.kubeConfig();
    const core = kubeConfig.makeApiClient(CoreV1Api);
    const registry = new Registry();
    const events: string[] = [];
    const informer = new Informer<V1Node, NodeRecord>({
      name: 'nodes',
      path: '/api/v1/nodes',
      list: options.decoded ? (o) => core.listNode(o) : kubeList(kubeConfig, '/api/v1/nodes'),
      watch: kubeWatch(kubeConfig),
      transform: slimNode,
      labelSelector: options.labelSelector,
      backoff: { initialMs: 20, maxMs: 100 },
      registry,
    });
    informer.addHandlers({
      add: (r) => events.push(`add ${r.name}`),
      update: (o, n) => events.push(`update ${n.name} ready ${o.ready}->${n.ready}`),
      delete: (r) => events.push(`delete ${r.name}`),
    });
    const metric = async (pattern: RegExp) => pattern.test(await registry.metrics());
    return { sim, informer, events, registry, metric };
  }

  test("a refused watch is logged with the API server's own words and the permission to grant", async () => {
    const sim = await startApiServer();
    // May list Nodes but not watch them (a ClusterRole missing one verb).
    sim.grant({ user: 'lister', verbs: ['list'], resources: ['nodes'] });
    const kubeConfig = sim.kubeConfig({ name: 'lister', groups: [] });
    const { logger, lines } = capturedLogger();
    const informer = new Informer<V1Node>({
      name: 'nodes',
      path: '/api/v1/nodes',
      list: kubeList(kubeConfig, '/api/v1/nodes'),
      watch: kubeWatch(kubeConfig),
      backoff: { initialMs: 20, maxMs: 100 },
      logger,
    });
    try {
      informer.start();
      assert.equal(await informer.waitForSync(), true);
      await eventually(() => lines.some((line) => line.includes('list/watch failed')), 'the refusal logged');
      const record = JSON.parse(lines.find((line) => line.includes('list/watch failed')) ?? '{}') as {
        err?: string;
      };
      assert.match(
        record.err ?? '',
        /^watch \/api\/v1\/nodes: HTTP 403: nodes is forbidden: User "lister" cannot watch resource "nodes".*; grant the permission in RBAC$/,
      );
    } finally {
      await informer.stop();
      await sim.close();
    }
  });

  test('syncs, follows add/update/delete, caches slim records, honours label selectors, stops', async () => {
    const { sim, informer, events } = await setup({ labelSelector: 'kops.k8s.io/instancegroup=nodes' });
    try {
      sim.store.create(node('n1', 'nodes'));
      sim.store.create(node('cp1', 'control-plane'));
      informer.start();
      assert.equal(await informer.waitForSync(), true);
      assert.deepEqual(informer.list(), [{ name: 'n1', ready: true, instanceGroup: 'nodes' }]);
      await eventually(() => sim.faults.openWatches === 1, 'the watch');
      sim.store.create(node('n2', 'nodes'));
      sim.store.create(node('cp2', 'control-plane'));
      sim.store.update(node('n1', 'nodes', false));
      sim.store.delete('nodes', undefined, 'n2');
      await eventually(() => events.length === 4, 'four events');
      assert.deepEqual(events, ['add n1', 'add n2', 'update n1 ready true->false', 'delete n2']);
      assert.deepEqual(informer.keys(), ['n1']);
    } finally {
      await informer.stop();
      await eventually(() => sim.faults.openWatches === 0, 'the watch to close');
      await sim.close();
    }
  });

  test('retries failed lists and refused watches, and resumes after a dropped watch', async () => {
    const { sim, informer, events, metric } = await setup({ decoded: true });
    try {
      sim.store.create(node('n1', 'nodes'));
      sim.faults.errors({ resource: 'nodes', verbs: ['list'], status: 503, count: 2 });
      informer.start();
      assert.equal(await informer.waitForSync(), true);
      assert.ok(await metric(/informer_lists_total\{resource="nodes",result="error"\} 2/));
      await eventually(() => sim.faults.openWatches === 1, 'the watch');

      sim.faults.errors({ resource: 'nodes', verbs: ['watch'], status: 500, count: 2 });
      sim.faults.dropWatches();
      // Seeing the old stream gone first makes the later "one open watch" the reconnected one.
      await eventually(() => sim.faults.openWatches === 0, 'the dropped watch to close');
      await eventually(
        () => metric(/informer_watch_restarts_total\{resource="nodes",reason="error"\} 2/),
        'two failed reconnects',
      );
      await eventually(() => sim.faults.openWatches === 1, 'the watch to reopen');
      sim.store.create(node('n2', 'nodes'));
      await eventually(() => events.includes('add n2'), 'the event after reconnecting');
      assert.ok(
        await metric(/informer_lists_total\{resource="nodes",result="success"\} 1/),
        'no re-list was needed',
      );
    } finally {
      await informer.stop();
      await sim.close();
    }
  });

  test('a server that answers 410 to every watch is re-listed with backoff, not in a loop', async () => {
    const { sim, informer, registry } = await setup();
    const lists = async () =>
      Number(
        /informer_lists_total\{resource="nodes",result="success"\} (\d+)/.exec(await registry.metrics())?.[1],
      );
    try {
      for (const name of ['a', 'b', 'c']) sim.store.create(node(name, 'nodes'));
      informer.start();
      await informer.waitForSync();
      await eventually(() => sim.faults.openWatches === 1, 'the watch');
      sim.faults.expireNext(100_000, { resource: 'nodes', verbs: ['watch'] });
      sim.faults.dropWatches();
      const before = await lists();
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      const relists = (await lists()) - before;
      // Backoff from 20 ms doubling to 100 ms allows about a dozen in a second; without it, hundreds.
      assert.ok(relists >= 2, `re-listed ${relists} times`);
      assert.ok(relists <= 20, `re-listed ${relists} times in a second`);
    } finally {
      await informer.stop();
      await sim.close();
    }
  });

  test('re-lists after 410 Gone and reports what changed meanwhile', async () => {
    const { sim, informer, events, metric } = await setup();
    try {
      for (const name of ['keep', 'change', 'vanish']) sim.store.create(node(name, 'nodes'));
      informer.start();
      await informer.waitForSync();
      await eventually(() => sim.faults.openWatches === 1, 'the watch');
      events.length = 0;
      // Hold the reconnect back while the store changes and compacts, so the old resourceVersion is gone.
      sim.faults.latency(500, { resource: 'nodes', verbs: ['watch'] });
      sim.faults.dropWatches();
      await eventually(
        () => metric(/informer_watch_restarts_total\{resource="nodes",reason="closed"\} 1/),
        'the drop',
      );
      await eventually(() => sim.faults.openWatches === 0, 'the dropped watch to close');
      sim.store.update(node('change', 'nodes', false));
      sim.store.delete('nodes', undefined, 'vanish');
      sim.store.create(node('new', 'nodes'));
      sim.store.compact();
      sim.faults.latency(0, { resource: 'nodes', verbs: ['watch'] });
      await eventually(
        () => metric(/informer_lists_total\{resource="nodes",result="success"\} 2/),
        'the re-list',
      );
      assert.ok(await metric(/informer_watch_restarts_total\{resource="nodes",reason="gone"\} 1/));
      assert.deepEqual(events, ['delete vanish', 'update change ready true->false', 'add new']);
      assert.deepEqual(informer.keys().sort(), ['change', 'keep', 'new']);
      await eventually(() => sim.faults.openWatches === 1, 'watching again');
      sim.store.delete('nodes', undefined, 'keep');
      await eventually(() => events.at(-1) === 'delete keep', 'events after the re-list');
    } finally {
      await informer.stop();
      await sim.close();
    }
  });

  test('stop closes the connection of a list page the API server never answers', async () => {
    const silent = await silentApiServer();
    const informer = new Informer<V1Node>({
      name: 'nodes',
      path: '/api/v1/nodes',
      list: kubeList(silent.kubeConfig, '/api/v1/nodes'),
      watch: kubeWatch(silent.kubeConfig),
    });
    try {
      informer.start();
      await eventually(() => silent.accepted() === 1, 'the list page');
      // Not the page's 60 s deadline: at once.
      assert.deepEqual(await outcomeWithin(informer.stop(), 2_000), { pending: false, value: undefined });
      await eventually(() => silent.open() === 0, 'the page to close its connection');
    } finally {
      silent.close();
    }
  });

  test('kubeList pages through the raw JSON; a refused page, or one whose continue token expired, is a typed error', async () => {
    const sim = await startApiServer();
    try {
      for (let i = 0; i < 5; i++) sim.store.create(node(`n${i}`, i % 2 ? 'a' : 'b'));
      const list = kubeList<V1Node>(sim.kubeConfig(), '/api/v1/nodes');
      const first = await list({ limit: 3, labelSelector: 'kops.k8s.io/instancegroup=b' });
      assert.deepEqual(
        first.items.map((n) => n.metadata?.name),
        ['n0', 'n2', 'n4'],
      );
      const paged = await list({ limit: 2 });
      assert.equal(paged.items.length, 2);
      assert.ok(paged.metadata?._continue, 'the continue token is passed on');
      const rest = await list({ limit: 10, _continue: paged.metadata?._continue });
      assert.deepEqual(
        rest.items.map((n) => n.metadata?.name),
        ['n2', 'n3', 'n4'],
      );
      assert.equal(
        typeof (rest.items[0]!.metadata as Record<string, unknown>)['creationTimestamp'],
        'string',
      );
      const stranger = kubeList(sim.kubeConfig({ name: 'stranger', groups: [] }), '/api/v1/nodes');
      await assert.rejects(
        stranger({}),
        (err: unknown) =>
          err instanceof ForbiddenError &&
          err.upstreamStatus === 403 &&
          /^list \/api\/v1\/nodes: HTTP 403: .*; grant the permission in RBAC$/.test(err.message),
      );
      // A continue token whose resourceVersion has been compacted away: 410, which makes the informer re-list.
      const expired = await list({ limit: 2 }).then((page) => page.metadata?._continue);
      sim.store.create(node('n9', 'a'));
      sim.store.compact();
      await assert.rejects(
        list({ limit: 2, _continue: expired }),
        (err: unknown) => httpStatusOfApiError(err) === 410,
      );
      // An API server that takes the request and does not answer: the page's deadline, then a retry.
      sim.faults.latency(2_000, { resource: 'nodes', verbs: ['list'] });
      const impatient = kubeList<V1Node>(sim.kubeConfig(), '/api/v1/nodes', { timeoutMs: 200 });
      await assert.rejects(impatient({ limit: 2 }), TimeoutError);
      sim.faults.latency(0, { resource: 'nodes', verbs: ['list'] });
    } finally {
      await sim.close();
    }
  });
});

describe('kubeWatch against a damaged watch stream', () => {
  /** Polls (in real time) until `condition` holds; fails after 10 s instead of hanging. */
  async function eventually(condition: () => boolean, what: string): Promise<void> {
    for (let i = 0; i < 1000; i++) {
      if (condition()) return;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    assert.fail(`timed out waiting for ${what}`);
  }

  const node = (name: string, rv: number, v: string) => ({
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name, resourceVersion: String(rv), labels: { v } },
  });
  type Node = ReturnType<typeof node>;
  const line = (type: string, object: unknown) => `${JSON.stringify({ type, object })}\n`;

  /**
   * A plain-HTTP API server on loopback: one list (n1 and n2 at rv 1), and the watch streams `streams`
   * writes, the n-th for the n-th watch request; it records the resourceVersion each resumed from.
   */
  async function fakeApiServer(streams: ((res: ServerResponse) => void)[], registry?: Registry) {
    const resumedFrom: string[] = [];
    const open = new Set<ServerResponse>();
    const server = createServer((req, res) => {
      const url = new URL(req.url ?? '/', 'http://x');
      if (url.searchParams.get('watch') !== 'true') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            kind: 'NodeList',
            apiVersion: 'v1',
            metadata: { resourceVersion: '1' },
            items: [node('n1', 1, 'old'), node('n2', 1, 'old')],
          }),
        );
        return;
      }
      resumedFrom.push(url.searchParams.get('resourceVersion') ?? '');
      open.add(res);
      res.on('close', () => open.delete(res));
      res.writeHead(200, { 'content-type': 'application/json' });
      // Later watches stay open and quiet.
      streams[resumedFrom.length - 1]?.(res);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const kubeConfig = new KubeConfig();
    kubeConfig.loadFromOptions({
      clusters: [
        {
          name: 'c',
          server: `http://127.0.0.1:${(server.address() as { port: number }).port}`,
          skipTLSVerify: true,
        },
      ],
      users: [{ name: 'u', token: 't' }],
      contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
      currentContext: 'x',
    });
    const informer = new Informer<Node>({
      name: 'nodes',
      path: '/api/v1/nodes',
      list: kubeList(kubeConfig, '/api/v1/nodes'),
      watch: kubeWatch(kubeConfig),
      backoff: { initialMs: 10, maxMs: 50 },
      registry,
    });
    return {
      informer,
      resumedFrom,
      open: () => open.size,
      async close() {
        await informer.stop();
        server.closeAllConnections();
        await new Promise((resolve) => server.close(resolve));
      },
    };
  }

  test('a damaged watch line (not JSON, or an object without metadata) ends the stream; the watch resumes from the last applied event', async () => {
    const modified = line('MODIFIED', node('n1', 2, 'new'));
    const api = await fakeApiServer([
      // rv 2 with one byte lost, then a bookmark that would move the resourceVersion past it.
      (res) => {
        res.write(`${modified.slice(0, 40)}${modified.slice(41)}`);
        res.write(line('BOOKMARK', { kind: 'Node', apiVersion: 'v1', metadata: { resourceVersion: '4' } }));
      },
      // From rv 1 again: rv 2 whole, then rv 3 with a null object, then a bookmark.
      (res) => {
        res.write(modified);
        res.write(line('MODIFIED', null));
        res.write(line('BOOKMARK', { kind: 'Node', apiVersion: 'v1', metadata: { resourceVersion: '4' } }));
      },
      // From rv 2: rv 3 whole.
      (res) => res.write(line('MODIFIED', node('n2', 3, 'new'))),
    ]);
    try {
      api.informer.start();
      await eventually(() => api.informer.get('n2')?.metadata.labels.v === 'new', 'n2 at rv 3');
      assert.deepEqual(
        api.resumedFrom,
        ['1', '1', '2'],
        'each damaged stream resumed from the last good event',
      );
      assert.equal(
        api.informer.get('n1')?.metadata.labels.v,
        'new',
        'the change the damaged line carried is not lost',
      );
      assert.equal(api.informer.resourceVersion, '3');
    } finally {
      await api.close();
    }
  });

  test('a connection reset under a stream that served is a dropped watch (reason reset), not an error; a reset before the server answered is one, however late', async () => {
    const registry = new Registry();
    const api = await fakeApiServer(
      [
        // Served an event, then the connection is cut (a load balancer or API server going away).
        (res) => {
          res.write(line('MODIFIED', node('n1', 2, 'new')), () =>
            setTimeout(() => res.socket?.resetAndDestroy(), 20),
          );
        },
        // Cut before the server answered (its 200 never sent), after more than a second: still an error.
        (res) => setTimeout(() => res.socket?.resetAndDestroy(), 1_100),
        (res) => res.write(line('MODIFIED', node('n2', 3, 'new'))),
      ],
      registry,
    );
    try {
      api.informer.start();
      await eventually(() => api.informer.get('n2')?.metadata.labels.v === 'new', 'n2 at rv 3');
      const metrics = await registry.metrics();
      assert.match(metrics, /informer_watch_restarts_total\{resource="nodes",reason="reset"\} 1/);
      assert.match(metrics, /informer_watch_restarts_total\{resource="nodes",reason="error"\} 1/);
      assert.deepEqual(api.resumedFrom, ['1', '2', '2']);
    } finally {
      await api.close();
    }
  });

  test('a watch line over maxWatchLineBytes ends the stream with an error instead of being buffered', async () => {
    assert.ok(maxWatchLineBytes >= maxNodeBytes, 'a Node of the largest size read still fits in one line');
    assert.ok(maxWatchLineBytes <= 8 * 1024 * 1024, 'a few MiB, not the hundreds V8 fails at');
    const api = await fakeApiServer([
      // A line that never ends: one byte over the cap, in 64 KiB chunks.
      (res) => {
        const chunk = Buffer.alloc(64 * 1024, 0x20);
        for (let sent = 0; sent <= maxWatchLineBytes; sent += chunk.length) res.write(chunk);
      },
      (res) => res.write(line('MODIFIED', node('n1', 2, 'new'))),
    ]);
    try {
      api.informer.start();
      await eventually(() => api.informer.get('n1')?.metadata.labels.v === 'new', 'the next stream’s event');
      assert.deepEqual(api.resumedFrom, ['1', '1']);
      await eventually(() => api.open() === 1, 'the oversized stream to be closed by the client');
    } finally {
      await api.close();
    }
  });
});

test('through an egress proxy that does not answer, stop() ends the list page at once and its tunnel with it; an aborted watch closes its tunnel', async () => {
  const stalled = await startStalledProxy();
  const waitFor = async (condition: () => boolean) => {
    for (let i = 0; i < 200 && !condition(); i++) await new Promise((resolve) => setTimeout(resolve, 10));
    assert.ok(condition(), 'condition never became true');
  };
  const dir = mkdtempSync(join(tmpdir(), 'informer-proxy-'));
  try {
    writeFileSync(
      join(dir, 'config'),
      [
        'apiVersion: v1',
        'kind: Config',
        'clusters:',
        '- name: c',
        '  cluster: {server: "https://api.c.proxied.test:6443"}',
        'contexts:',
        '- name: x',
        '  context: {cluster: c, user: u}',
        'current-context: x',
        'users:',
        '- name: u',
        '  user: {token: t}',
        '',
      ].join('\n'),
    );
    // The API server is not in NO_PROXY: the kubeconfig gets the environment's proxy.
    const { kubeConfig } = loadKubeConfig({
      kubeconfig: join(dir, 'config'),
      env: { HTTPS_PROXY: stalled.url, NO_PROXY: '127.0.0.1,localhost' },
    });
    const informer = new Informer<V1Node>({
      name: 'nodes',
      path: '/api/v1/nodes',
      list: kubeList(kubeConfig, '/api/v1/nodes', { timeoutMs: 20_000 }),
      watch: kubeWatch(kubeConfig),
    });
    void informer.start();
    await waitFor(() => stalled.open.size === 1);
    const started = Date.now();
    await informer.stop();
    const took = Date.now() - started;
    assert.ok(took < 1_000, `stop() took ${took} ms`);
    await drained(stalled.open, 1_000);
    // A watch given up on before the proxy answers leaves nothing open at the proxy either.
    const handle = await kubeWatch(kubeConfig)(
      '/api/v1/nodes',
      {},
      () => undefined,
      () => undefined,
    );
    await waitFor(() => stalled.open.size === 1);
    handle.abort();
    await drained(stalled.open, 1_000);
  } finally {
    await stalled.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
