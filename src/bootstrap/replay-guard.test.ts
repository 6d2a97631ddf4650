import assert from 'node:assert/strict';
import { test } from 'node:test';
import { makeClients } from '../kube/client.ts';
import { startApiServer } from '../sim/apiserver/index.ts';
import { FakeClock, settle } from '../testing/fake-clock.ts';
import {
  ConfigMapReplayGuard,
  MemoryReplayGuard,
  markerName,
  ReplayMarkerCollector,
  replayExpiresLabel,
} from './replay-guard.ts';

const digest = 'ab'.repeat(32);

test('ConfigMapReplayGuard: one claim wins across replicas, the rest see a replay; GC drops expired markers', async () => {
  const sim = await startApiServer();
  try {
    const replicaA = new ConfigMapReplayGuard({ core: makeClients(sim.kubeConfig()).core });
    const replicaB = new ConfigMapReplayGuard({ core: makeClients(sim.kubeConfig()).core });
    const expires = new Date('2026-03-01T12:05:00Z');
    const results = await Promise.all([replicaA.claim(digest, expires), replicaB.claim(digest, expires)]);
    assert.deepEqual(results.sort(), [false, true]);
    assert.equal(await replicaA.claim(digest, expires), false);
    assert.equal(await replicaA.claim('cd'.repeat(32), new Date('2026-03-01T13:00:00Z')), true);

    const core = makeClients(sim.kubeConfig()).core;
    const marker = await core.readNamespacedConfigMap({ name: markerName(digest), namespace: 'kube-system' });
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

test('MemoryReplayGuard forgets a digest only after it expires', async () => {
  let now = 0;
  const guard = new MemoryReplayGuard(() => now);
  assert.equal(await guard.claim(digest, new Date(1000)), true);
  assert.equal(await guard.claim(digest, new Date(1000)), false);
  now = 2000;
  assert.equal(await guard.claim(digest, new Date(3000)), true);
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
