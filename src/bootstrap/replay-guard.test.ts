import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { KubeConfig } from '@kubernetes/client-node';
import { KopsError } from '../errors.ts';
import { makeClients } from '../kube/client.ts';
import { type KubeObject, startApiServer } from '../sim/apiserver/index.ts';
import { FakeClock, settle } from '../testing/fake-clock.ts';
import { msToStop } from '../testing/leadership.ts';
import {
  ConfigMapReplayGuard,
  MemoryReplayGuard,
  markerName,
  ReplayMarkerCollector,
  replayExpiresLabel,
  replayMarkerMarginMs,
} from './replay-guard.ts';

const digest = 'ab'.repeat(32);

/**
 * The two ways a replica writes its markers: through client-node, and over plain HTTPS (the join
 * path's); every claim test runs against both.
 */
const transports = {
  'client-node': (kubeConfig: KubeConfig, timeoutMs?: number) =>
    new ConfigMapReplayGuard({ core: makeClients(kubeConfig).core, timeoutMs }),
  https: (kubeConfig: KubeConfig, timeoutMs?: number) =>
    new ConfigMapReplayGuard({ core: makeClients(kubeConfig).core, kubeConfig, timeoutMs }),
};
/** The SHA-256 (hex) of the request that spends the proof, and of another request. */
const request = '01'.repeat(32);
const otherRequest = '02'.repeat(32);

/** Asserts a dependency fault naming the API server: a 503 to the node, never a replay (403). */
function isApiServerFault(err: unknown): boolean {
  assert.ok(err instanceof KopsError, String(err));
  assert.equal(err.kind, 'unavailable', err.message);
  assert.equal(err.details?.['reason'], 'dependency-unavailable');
  assert.equal(err.details?.['dependency'], 'kubernetes-api');
  return true;
}

for (const [via, guardOf] of Object.entries(transports)) {
  test(`${via}: ConfigMapReplayGuard: one claim wins across replicas, the rest see a replay; GC drops expired markers`, async () => {
    const sim = await startApiServer();
    try {
      const replicaA = guardOf(sim.kubeConfig());
      const replicaB = guardOf(sim.kubeConfig());
      const expires = new Date('2026-03-01T12:05:00Z');
      const results = await Promise.all([
        replicaA.claim(digest, expires, request),
        replicaB.claim(digest, expires, otherRequest),
      ]);
      assert.deepEqual(results.sort(), [false, true]);
      assert.equal(await replicaA.claim(digest, expires, '03'.repeat(32)), false);
      assert.equal(await replicaA.claim('cd'.repeat(32), new Date('2026-03-01T13:00:00Z'), request), true);

      const core = makeClients(sim.kubeConfig()).core;
      const marker = await core.readNamespacedConfigMap({
        name: markerName(digest),
        namespace: 'kube-system',
      });
      assert.equal(marker.metadata?.labels?.[replayExpiresLabel], String(expires.getTime() / 1000));

      assert.equal(await replicaB.collectGarbage(new Date('2026-03-01T12:30:00Z')), 1);
      const left = await core.listNamespacedConfigMap({
        namespace: 'kube-system',
        labelSelector: replayExpiresLabel,
      });
      assert.deepEqual(
        left.items.map((i) => i.metadata?.name),
        [markerName('cd'.repeat(32))],
      );
    } finally {
      await sim.close();
    }
  });
}

test("attack: a replica whose clock lags the leader's by minutes still refuses a replay: the leader collects a marker only once it expired more than the margin ago", async () => {
  const sim = await startApiServer();
  try {
    const core = makeClients(sim.kubeConfig()).core;
    const leader = new ConfigMapReplayGuard({ core });
    const lagging = new ConfigMapReplayGuard({ core });
    // Spent on the lagging replica, whose clock still accepts the proof for three more minutes.
    const expires = new Date('2026-03-01T12:05:00Z');
    assert.equal(await lagging.claim(digest, expires, request), true);
    const leaderNow = new Date(expires.getTime() + 3 * 60_000);
    assert.equal(await leader.collectGarbage(leaderNow), 0, 'expired on the leader, within the margin');
    assert.equal(await lagging.claim(digest, expires, otherRequest), false, 'still refused as a replay');
    assert.equal(await leader.collectGarbage(new Date(expires.getTime() + replayMarkerMarginMs + 1_000)), 1);
  } finally {
    await sim.close();
  }
});

for (const [via, guardOf] of Object.entries(transports)) {
  test(`${via}: ConfigMapReplayGuard: the marker records the request; the same request again is its own retry, another is a replay`, async () => {
    const sim = await startApiServer();
    try {
      const guard = guardOf(sim.kubeConfig());
      const expires = new Date('2026-03-01T12:05:00Z');
      assert.equal(await guard.claim(digest, expires, request), true);
      assert.equal(await guard.claim(digest, expires, request), true, 'the same request, retried');
      assert.equal(await guard.claim(digest, expires, otherRequest), false, 'the proof on another request');
    } finally {
      await sim.close();
    }
  });
}

for (const [via, guardOf] of Object.entries(transports)) {
  test(`${via}: attack: a marker write committed though the API server answered 503 — the retry passes, a replay does not`, async () => {
    const sim = await startApiServer();
    try {
      const guard = guardOf(sim.kubeConfig());
      const expires = new Date('2026-03-01T12:05:00Z');
      sim.faults.errors({
        resource: 'configmaps',
        verbs: ['create'],
        count: 1,
        status: 503,
        afterCommit: true,
      });
      await assert.rejects(guard.claim(digest, expires, request), isApiServerFault);
      assert.equal(await guard.claim(digest, expires, request), true, 'the node retries the same request');
      assert.equal(await guard.claim(digest, expires, otherRequest), false, 'someone else replays the proof');
    } finally {
      await sim.close();
    }
  });
}

for (const [via, guardOf] of Object.entries(transports)) {
  test(`${via}: a marker write answered 503, 429 or not at all in time is a dependency fault, never a replay`, async () => {
    const sim = await startApiServer();
    try {
      const guard = guardOf(sim.kubeConfig(), 300);
      const expires = new Date('2026-03-01T12:05:00Z');
      for (const status of [503, 429, 500] as const) {
        sim.faults.errors({ resource: 'configmaps', verbs: ['create'], count: 1, status });
        await assert.rejects(guard.claim(digest, expires, request), isApiServerFault, `HTTP ${status}`);
      }
      sim.faults.errors({
        resource: 'configmaps',
        verbs: ['create'],
        count: 1,
        status: 429,
        retryAfterSeconds: 30,
      });
      await assert.rejects(guard.claim(digest, expires, request), (err: unknown) => {
        assert.ok(isApiServerFault(err));
        assert.equal(
          (err as KopsError).details?.['retryAfterSeconds'],
          30,
          "the API server's own wait is kept",
        );
        return true;
      });
      sim.faults.latency(3_000, { resource: 'configmaps', verbs: ['create'] });
      await assert.rejects(guard.claim(digest, expires, request), isApiServerFault, 'no answer in time');
      sim.faults.reset();
      // Whether or not the slow write landed meanwhile, the same request now passes.
      assert.equal(await guard.claim(digest, expires, request), true);
    } finally {
      await sim.close();
    }
  });
}

for (const [via, guardOf] of Object.entries(transports)) {
  test(`${via}: a marker that exists but cannot be read back is a dependency fault`, async () => {
    const sim = await startApiServer();
    try {
      const guard = guardOf(sim.kubeConfig());
      const expires = new Date('2026-03-01T12:05:00Z');
      assert.equal(await guard.claim(digest, expires, request), true);
      sim.faults.errors({ resource: 'configmaps', verbs: ['get'], count: 1, status: 503 });
      await assert.rejects(guard.claim(digest, expires, otherRequest), isApiServerFault);
      assert.equal(await guard.claim(digest, expires, otherRequest), false);
    } finally {
      await sim.close();
    }
  });
}

test('replicas writing markers through client-node and over HTTPS share them: one claim of a proof wins', async () => {
  const sim = await startApiServer();
  try {
    const expires = new Date('2026-03-01T12:05:00Z');
    const replicas = [transports['client-node'](sim.kubeConfig()), transports.https(sim.kubeConfig())];
    for (let i = 0; i < 20; i++) {
      const proof = i.toString(16).padStart(2, '0').repeat(32);
      const results = await Promise.all([
        replicas[i % 2]?.claim(proof, expires, request),
        replicas[(i + 1) % 2]?.claim(proof, expires, otherRequest),
      ]);
      assert.deepEqual(results.sort(), [false, true], `proof ${i}`);
    }
  } finally {
    await sim.close();
  }
});

test('MemoryReplayGuard forgets a digest only once it expired more than the margin ago; the same request again is its retry', async () => {
  let now = 0;
  const guard = new MemoryReplayGuard(() => now);
  assert.equal(await guard.claim(digest, new Date(1000), request), true);
  assert.equal(await guard.claim(digest, new Date(1000), otherRequest), false);
  assert.equal(await guard.claim(digest, new Date(1000), request), true);
  now = 1000 + replayMarkerMarginMs;
  assert.equal(await guard.claim(digest, new Date(now + 1000), otherRequest), false, 'within the margin');
  now += 1;
  assert.equal(await guard.claim(digest, new Date(now + 1000), otherRequest), true);
});

test('MemoryReplayGuard forgets an outlived digest between its sweeps too (it sweeps at most once a second)', async () => {
  let now = 0;
  const guard = new MemoryReplayGuard(
    () => now,
    () => 0,
  );
  assert.equal(await guard.claim(digest, new Date(100), request), true);
  now = 101 + replayMarkerMarginMs;
  assert.equal(await guard.claim(digest, new Date(now + 1000), otherRequest), true, 'outlived, not swept');
  assert.equal(
    await guard.claim(digest, new Date(now + 1000), request),
    false,
    'now spent on the other request',
  );
});

test('attack: MemoryReplayGuard: a wall clock stepped ten minutes forward and back does not make a spent proof usable again', async () => {
  let wall = 0;
  let monotonic = 0;
  const guard = new MemoryReplayGuard(
    () => wall,
    () => monotonic,
  );
  assert.equal(await guard.claim(digest, new Date(300_000), request), true);
  wall += 600_000; // stepped forward: the record has expired on this clock
  monotonic += 2_000;
  assert.equal(await guard.claim('cd'.repeat(32), new Date(wall + 300_000), request), true, 'a sweep ran');
  wall -= 600_000; // and back: the proof is fresh again
  monotonic += 2_000;
  assert.equal(await guard.claim(digest, new Date(300_000), otherRequest), false);
});

test('markerName is a DNS label', () => {
  assert.match(markerName(digest), /^bootstrap-proof-[0-9a-f]{40}$/);
});

test('ReplayMarkerCollector sweeps until stopped, surviving a failed sweep', async () => {
  const clock = new FakeClock(Date.parse('2026-03-01T12:00:00Z'));
  const sweeps: string[] = [];
  const guard = {
    collectGarbage: async (now: Date) => {
      sweeps.push(now.toISOString());
      if (sweeps.length === 1) throw new Error('apiserver unavailable');
      return 1;
    },
  };
  const stop = new AbortController();
  const running = new ReplayMarkerCollector({ guard, intervalMs: 60_000, clock }).start(stop.signal);
  await settle();
  await clock.advance(60_000);
  await settle();
  stop.abort();
  await running;
  assert.deepEqual(sweeps, ['2026-03-01T12:00:00.000Z', '2026-03-01T12:01:00.000Z']);
});

/** An expired marker as the API server stores it. */
const expiredMarker = (i: number) =>
  ({
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: {
      name: markerName(i.toString(16).padStart(8, '0').padEnd(64, '0')),
      namespace: 'kube-system',
      labels: { [replayExpiresLabel]: String(Date.parse('2026-03-01T12:00:00Z') / 1000) },
    },
  }) as KubeObject;

/** How many times the API server was asked to list ConfigMaps (the markers), from now on. */
function countMarkerLists(sim: Awaited<ReturnType<typeof startApiServer>>): () => number {
  let lists = 0;
  const plan = sim.faults.plan.bind(sim.faults);
  sim.faults.plan = (resource, verb, namespace) => {
    if (resource === 'configmaps' && verb === 'list') lists++;
    return plan(resource, verb, namespace);
  };
  return () => lists;
}

test('collectGarbage reads the markers in pages (limit and continue), deleting the expired ones of each', async () => {
  const sim = await startApiServer();
  try {
    const lists = countMarkerLists(sim);
    for (let i = 0; i < 502; i++) sim.store.create(expiredMarker(i));
    const guard = new ConfigMapReplayGuard({ core: makeClients(sim.kubeConfig()).core });
    assert.equal(await guard.collectGarbage(new Date('2026-03-01T12:30:00Z')), 502);
    assert.equal(lists(), 2, 'a page of 500, then the remaining 2');
    assert.equal(sim.store.list('configmaps', 'kube-system').length, 0);
  } finally {
    await sim.close();
  }
});

test('ReplayMarkerCollector stops within a second when leadership ends while the API server is slow to list markers', async () => {
  const sim = await startApiServer();
  try {
    const lists = countMarkerLists(sim);
    // The brownout that costs the lease: listing takes 10 s.
    sim.faults.latency(10_000, { resource: 'configmaps', verbs: ['list'] });
    sim.store.create(expiredMarker(1));
    const guard = new ConfigMapReplayGuard({ core: makeClients(sim.kubeConfig()).core });
    const leading = new AbortController();
    const run = new ReplayMarkerCollector({ guard }).start(leading.signal);
    for (let i = 0; i < 500 && lists() === 0; i++) await new Promise((resolve) => setTimeout(resolve, 10));
    assert.equal(lists(), 1, 'the sweep’s list is in flight');
    const ms = await msToStop(leading, run);
    assert.ok(ms < 1_000, `stopped ${Math.round(ms)} ms after leadership ended`);
  } finally {
    await sim.close();
  }
});
