/**
 * The recorder of the controllers' Events on Nodes, over the simulated API server with a fake clock:
 * a report seen again is written once and refreshed, an Event someone else wrote is left alone, one
 * the API server's TTL removed is made again, the write rate is bounded by dropping (never queueing),
 * and failures are counted and logged, never thrown.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, beforeEach, test } from 'node:test';
import { Registry } from 'prom-client';
import { type KubeObject, type SimApiServer, startApiServer } from '../../sim/apiserver/index.ts';
import { FakeClock } from '../../testing/fake-clock.ts';
import { capturedLogger } from '../../testing/log-capture.ts';
import { outcomeWithin, silentApiServer } from '../../testing/silent-server.ts';
import { eventName, eventNameKey, nodeEvent } from './node-event.ts';
import {
  NodeEventRecorder,
  type NodeEventRecorderOptions,
  sharedNodeEventRecorder,
} from './node-event-recorder.ts';

const minute = 60_000;
/** The replicas' key Event names are made with (the test's). */
const nameKey = eventNameKey(Buffer.alloc(32, 7));
let api: SimApiServer;
const running = new AbortController();

before(async () => {
  api = await startApiServer();
});
after(() => api.close());
beforeEach(() => {
  for (const event of api.store.list('events', 'default'))
    api.store.delete('events', 'default', event.metadata.name ?? '');
  api.faults.reset();
});

function recorder(options: NodeEventRecorderOptions = {}) {
  const clock = new FakeClock();
  const registry = new Registry();
  const { logger, lines } = capturedLogger();
  const events = new NodeEventRecorder(api.kubeConfig(), {
    clock,
    registry,
    logger,
    nameKey: () => nameKey,
    ...options,
  });
  const results = async () =>
    Object.fromEntries(
      ((await registry.getSingleMetric('node_event_reports_total')?.get())?.values ?? []).map((v) => [
        v.labels['result'],
        v.value,
      ]),
    );
  return { events, clock, lines, results };
}

const node = { name: 'i-0123456789abcdef0', uid: 'uid-1' };
const message = 'not labelling node: instance i-0123456789abcdef0 is tagged for cluster other';

function stored(): KubeObject | undefined {
  return api.store.get('events', 'default', eventName(node, 'Warning', 'IdentityRejected', message, nameKey));
}

/** Waits (in real time, the fake clock still) for writes the backlog started. */
async function eventually(check: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !check(); i++) await new Promise((resolve) => setTimeout(resolve, 10));
  assert.ok(check(), 'not within 2 s');
}

function record(events: NodeEventRecorder, on = node) {
  return events.record(on, 'Warning', 'IdentityRejected', message, running.signal);
}

test('a report seen again is only counted for 30 minutes; the next one patches count and lastTimestamp', async () => {
  const { events, clock, results } = recorder();
  assert.equal(await record(events), 'created');
  const first = stored();
  assert.equal(first?.['count'], 1);
  for (let i = 0; i < 5; i++) {
    await clock.advance(5 * minute);
    assert.equal(await record(events), 'recent');
  }
  assert.equal(stored()?.metadata.resourceVersion, first?.metadata.resourceVersion, 'not written again');
  await clock.advance(5 * minute);
  assert.equal(await record(events), 'updated');
  const refreshed = stored();
  assert.equal(refreshed?.['count'], 7, 'every report counted');
  assert.equal(refreshed?.['firstTimestamp'], first?.['firstTimestamp']);
  assert.equal(refreshed?.['lastTimestamp'], new Date(clock.now()).toISOString().replace(/\.\d+Z$/, 'Z'));
  assert.equal(api.store.list('events', 'default').length, 1);
  assert.deepEqual(await results(), { created: 1, recent: 5, updated: 1 });
});

test('an Event another leader or process wrote is left as it is, then refreshed keeping its count', async () => {
  api.store.create({
    ...nodeEvent(
      eventName(node, 'Warning', 'IdentityRejected', message, nameKey),
      node,
      'Warning',
      'IdentityRejected',
      message,
      new Date(Date.UTC(2025, 11, 31)),
      9,
    ),
    firstTimestamp: '2025-12-31T00:00:00Z',
    lastTimestamp: '2025-12-31T00:00:00Z',
  } as unknown as KubeObject);
  const written = stored()?.metadata.resourceVersion;
  const { events, clock, results } = recorder();
  assert.equal(await record(events), 'exists');
  assert.equal(stored()?.metadata.resourceVersion, written, 'a create that found it wrote nothing');
  await clock.advance(10 * minute);
  assert.equal(await record(events), 'recent');
  await clock.advance(30 * minute);
  assert.equal(await record(events), 'updated');
  assert.equal(stored()?.['count'], 9, "the writer's count kept");
  assert.notEqual(stored()?.['lastTimestamp'], '2025-12-31T00:00:00Z');
  await clock.advance(30 * minute);
  assert.equal(await record(events), 'updated');
  assert.equal(stored()?.['count'], 10);
  assert.deepEqual(await results(), { exists: 1, recent: 1, updated: 2 });
});

test('an Event the API server removed meanwhile (its TTL) is created again with the reports it missed', async () => {
  const { events, clock } = recorder();
  assert.equal(await record(events), 'created');
  await clock.advance(10 * minute);
  assert.equal(await record(events), 'recent');
  api.store.delete('events', 'default', stored()?.metadata.name ?? '');
  await clock.advance(25 * minute);
  assert.equal(await record(events), 'created');
  assert.equal(stored()?.['count'], 3);
});

test('writes past 100 at once wait in the backlog and go at 10 a second, in the order they came', async () => {
  const { events, clock, results } = recorder();
  const nodes = Array.from({ length: 150 }, (_, i) => ({ name: `node-${i}`, uid: `uid-${i}` }));
  const first = await Promise.all(nodes.map((n) => record(events, n)));
  assert.equal(first.filter((r) => r === 'created').length, 100);
  assert.equal(first.filter((r) => r === 'queued').length, 50);
  assert.equal(api.store.list('events', 'default').length, 100);
  assert.equal(events.backlog, 50);
  // Seen again while waiting: counted, not queued twice.
  assert.equal(await record(events, nodes[149]), 'recent');
  await clock.advance(1_000);
  await eventually(() => api.store.list('events', 'default').length === 110);
  const written = new Set(api.store.list('events', 'default').map((e) => e.metadata.name));
  assert.ok(
    nodes
      .slice(100, 110)
      .every((n) => written.has(eventName(n, 'Warning', 'IdentityRejected', message, nameKey))),
    'the first to wait are the first written',
  );
  await clock.advance(4_000);
  await eventually(() => api.store.list('events', 'default').length === 150);
  assert.equal(events.backlog, 0);
  assert.deepEqual(await results(), { created: 150, queued: 50, recent: 1 });
});

test('past a full backlog reports are dropped, counted and logged once per ten minutes; what waits for a caller that stopped is not written', async () => {
  const { events, clock, lines, results } = recorder({ maxBacklog: 20 });
  const term = new AbortController();
  const nodes = Array.from({ length: 150 }, (_, i) => ({ name: `node-${i}`, uid: `uid-${i}` }));
  const first = await Promise.all(
    nodes.map((n) => events.record(n, 'Warning', 'IdentityRejected', message, term.signal)),
  );
  assert.deepEqual(
    ['created', 'queued', 'dropped'].map((r) => first.filter((f) => f === r).length),
    [100, 20, 30],
  );
  const dropLines = lines.filter((l) => l.includes('with the backlog full'));
  assert.equal(dropLines.length, 1, 'one line for 30 drops');
  // Leadership ends: what waits is let go.
  term.abort(new Error('leadership lost'));
  await clock.advance(10_000);
  assert.equal(api.store.list('events', 'default').length, 100);
  assert.equal(events.backlog, 0);
  assert.deepEqual(await results(), { created: 100, queued: 20, dropped: 30 });
});

test('a write the API server fails is counted and logged once per cause, never thrown; the next report writes it', async () => {
  const { events, lines, results } = recorder();
  api.faults.errors({ resource: 'events', verbs: ['create'], status: 503, count: 3 });
  const others = [1, 2].map((i) => ({ name: `node-${i}`, uid: `uid-${i}` }));
  assert.equal(await record(events), 'failed');
  for (const other of others) assert.equal(await record(events, other), 'failed');
  assert.equal(stored(), undefined);
  assert.equal(await record(events), 'created', 'not taken as written');
  assert.deepEqual(await results(), { failed: 3, created: 1 });
  const failureLines = lines.filter((l) => l.includes('could not write an Event'));
  assert.equal(failureLines.length, 1, 'one line for one cause on three nodes');
  assert.match(failureLines[0] ?? '', /HTTP 503/);
});

test('a stop ends a write the API server does not answer at once, with its reason, and closes its connection', async () => {
  const silent = await silentApiServer();
  try {
    const events = new NodeEventRecorder(silent.kubeConfig, { registry: new Registry() });
    const stop = new AbortController();
    const writing = events.record(node, 'Warning', 'IdentityRejected', message, stop.signal);
    for (let i = 0; i < 200 && silent.accepted() === 0; i++) await new Promise((r) => setTimeout(r, 10));
    assert.ok(silent.accepted() > 0, 'the create reached the server');
    const reason = new Error('leadership lost');
    stop.abort(reason);
    const outcome = await outcomeWithin(writing, 1_000);
    assert.equal(outcome.pending, false, 'the write did not outlive the stop');
    assert.equal(outcome.pending === false ? outcome.error : undefined, reason);
    for (let i = 0; i < 200 && silent.open() > 0; i++) await new Promise((r) => setTimeout(r, 10));
    assert.equal(silent.open(), 0, 'its connection closed');
  } finally {
    silent.close();
  }
});

test('the controllers built from one client configuration share one recorder: one write rate per process', () => {
  const kubeConfig = api.kubeConfig();
  const shared = sharedNodeEventRecorder(kubeConfig, { registry: new Registry() });
  assert.equal(sharedNodeEventRecorder(kubeConfig), shared);
  assert.notEqual(sharedNodeEventRecorder(api.kubeConfig(), { registry: new Registry() }), shared);
});

test("attack: a refused node creates its refusal's Event first, under a name computed from what it can read, to hide the Warning; the recorder's name is keyed, so its Warning is written and shown", async () => {
  // Every part of the report is public to the node; only the replicas' key is not.
  const squatted = [
    eventName(node, 'Warning', 'IdentityRejected', message, eventNameKey(Buffer.alloc(32, 0))),
    // The name an unkeyed hash of the report gave (before this fix).
    `${node.name}.${createHash('sha256')
      .update(
        JSON.stringify([node.name, node.uid, 'Warning', 'IdentityRejected', message, 'kops-controller']),
      )
      .digest('hex')
      .slice(0, 16)}`,
  ];
  for (const name of squatted) {
    api.store.create({
      apiVersion: 'v1',
      kind: 'Event',
      metadata: { name, namespace: 'default' },
      involvedObject: { apiVersion: 'v1', kind: 'Node', name: node.name, uid: node.name },
      type: 'Normal',
      reason: 'Nothing',
      message: 'all good',
      source: { component: 'kubelet' },
    } as unknown as KubeObject);
  }
  const { events } = recorder();
  assert.equal(await record(events), 'created');
  assert.equal(stored()?.['type'], 'Warning');
  assert.equal(stored()?.['message'], message);
  assert.ok(!squatted.includes(stored()?.metadata.name ?? ''));
});

test("two replicas with the key find each other's Event; without a key each names its own at random", async () => {
  const first = recorder();
  const second = recorder();
  assert.equal(await record(first.events), 'created');
  assert.equal(await record(second.events), 'exists', 'the other leader wrote it: left as it is');
  const keyless = [recorder({ nameKey: () => undefined }), recorder({ nameKey: () => undefined })];
  for (const { events } of keyless) assert.equal(await record(events), 'created');
  const names = api.store.list('events', 'default').map((e) => e.metadata.name);
  assert.equal(new Set(names).size, 3, JSON.stringify(names));
});

test('attack: a rewrite of the Event by someone who learnt its name is undone at the next refresh', async () => {
  const { events, clock } = recorder();
  assert.equal(await record(events), 'created');
  const written = stored();
  assert.ok(written);
  api.store.update({
    ...written,
    type: 'Normal',
    reason: 'Nothing',
    message: 'all good',
    involvedObject: { apiVersion: 'v1', kind: 'Node', name: 'another-node', uid: 'another-node' },
    source: { component: 'kubelet' },
  } as KubeObject);
  await clock.advance(31 * minute);
  assert.equal(await record(events), 'updated');
  assert.equal(stored()?.['type'], 'Warning');
  assert.equal(stored()?.['reason'], 'IdentityRejected');
  assert.equal(stored()?.['message'], message);
  assert.deepEqual(stored()?.['involvedObject'], {
    apiVersion: 'v1',
    kind: 'Node',
    name: node.name,
    uid: node.name,
  });
  assert.deepEqual(stored()?.['source'], { component: 'kops-controller' });
});

test('an Event named at random before the key was read is written under its keyed name once there is one', async () => {
  let key: Uint8Array | undefined;
  const { events, clock } = recorder({ nameKey: () => key });
  assert.equal(await record(events), 'created');
  assert.equal(stored(), undefined, 'not under the keyed name yet');
  key = nameKey;
  await clock.advance(31 * minute);
  assert.equal(await record(events), 'created');
  assert.equal(stored()?.['message'], message, 'now under the name another leader computes');
});

test("a report waits for the first read of the key to settle (IPAM's as the NodeController's): its Event gets the keyed name", async () => {
  let settle: (key: Uint8Array | undefined) => void = () => undefined;
  const ready = new Promise<Uint8Array | undefined>((resolve) => {
    settle = resolve;
  });
  const { events } = recorder({ nameKey: () => ready });
  const recorded = record(events);
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(api.store.list('events', 'default').length, 0, 'nothing written before the key is read');
  settle(nameKey);
  assert.equal(await recorded, 'created');
  assert.equal(stored()?.['message'], message);
});

test('a report whose key never settles ends when its caller stops', async () => {
  const { events } = recorder({ nameKey: () => new Promise<Uint8Array | undefined>(() => {}) });
  const stop = new AbortController();
  const recorded = events.record(
    { name: 'n1', uid: 'u1' },
    'Warning',
    'IdentityRejected',
    'refused',
    stop.signal,
  );
  stop.abort(new Error('term ended'));
  await assert.rejects(recorded, /term ended/);
});
