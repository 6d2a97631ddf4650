/**
 * The NodeController's Events at fleet scale, over the simulated API server: a refused node's Event
 * is one object, whichever leader or process reports it (volume audit finding 7: every failover or
 * rollout recreated one per refused node), it is one the real API server takes whatever the node's
 * name, and `kubectl describe node` (1.20) shows it.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { promisify } from 'node:util';
import { Registry } from 'prom-client';
import type { IdentifyResult, NodeIdentifier } from '../../cloud/types.ts';
import { ForbiddenError } from '../../errors.ts';
import { nodeInformer } from '../../kube/shared-informer.ts';
import type { Logger } from '../../log.ts';
import { type KubeObject, type SimApiServer, startApiServer } from '../../sim/apiserver/index.ts';
import { ClusterStore, seedClusterStore } from '../../statestore/cluster-store.ts';
import { loadSampleCluster } from '../../statestore/fixtures.ts';
import { openVfs } from '../../statestore/open.ts';
import { apiServerRequests } from '../../testing/apiserver-requests.ts';
import { countReaches } from '../../testing/count-reaches.ts';
import { capturedLogger } from '../../testing/log-capture.ts';
import { toolPath } from '../../testing/tools.ts';
import { identityRejectedReason, maxRefusalLinesPerTerm, NodeController } from './node-controller.ts';

const run = promisify(execFile);
const sample = await loadSampleCluster('aws');
const root = openVfs(`memfs://node-event-fleet-${process.pid}`);
await seedClusterStore(root, sample.name, sample);

let api: SimApiServer;
before(async () => {
  api = await startApiServer();
});
after(() => api.close());

/** The cloud's verdict on every instance: another cluster's. */
const refusing: NodeIdentifier = {
  identify: async (ids) =>
    new Map<string, IdentifyResult>(
      ids.map((id) => [
        id,
        {
          ok: false,
          error: new ForbiddenError(`instance ${id.split('/').pop()} is tagged for cluster other`),
        },
      ]),
    ),
};

function createNode(name: string): void {
  api.store.create({
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name },
    spec: { providerID: `aws:///us-test-1a/${name.slice(0, 40)}` },
  } as KubeObject);
}

/**
 * One leadership term of a NodeController in a process of its own (a client configuration of its
 * own, as a new replica or a restarted one has): runs until `n` refusals are counted, then ends.
 */
async function term(n: number, logger?: Logger): Promise<void> {
  const registry = new Registry();
  const kubeConfig = api.kubeConfig();
  const nodes = nodeInformer(kubeConfig);
  const controller = new NodeController({
    kubeConfig,
    nodes,
    identifier: refusing,
    clusterStore: new ClusterStore(openVfs(`${root.url}/${sample.name}`), { pollIntervalMs: 60_000 }),
    registry,
    ...(logger ? { logger } : {}),
  });
  const stop = new AbortController();
  const running = controller.start(stop.signal);
  const rejections = async () =>
    (await registry.getSingleMetric('node_controller_reconciles_total')?.get())?.values.find(
      (v) => v.labels['result'] === 'rejected',
    )?.value ?? 0;
  try {
    await countReaches(rejections, n, 'refusals', 20_000);
  } finally {
    stop.abort();
    await running;
    await nodes.close();
  }
}

/** The simulated API server's answered requests on Events, by verb and code (from its /metrics). */
async function eventRequests(): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  for (const { labels, count } of await apiServerRequests(api, 'events')) {
    const key = `${labels['verb']} ${labels['code']}`;
    counts[key] = (counts[key] ?? 0) + count;
  }
  return counts;
}

function eventsAbout(names: readonly string[]): KubeObject[] {
  const wanted = new Set(names);
  return api.store
    .list('events', 'default')
    .filter((e) => wanted.has(String((e['involvedObject'] as { name?: string }).name)));
}

test('refused nodes cost one Event each across leaders and restarts: a second process writes none', async () => {
  const names = Array.from({ length: 60 }, (_, i) => `i-0fleet${String(i).padStart(9, '0')}`);
  for (const name of names) createNode(name);
  try {
    await term(names.length);
    assert.equal(eventsAbout(names).length, names.length, 'one Event per refused node');
    const first = await eventRequests();
    assert.equal(first['POST 201'] ?? 0, names.length);
    // The lease moves to another replica (or the DaemonSet rolls): it refuses the same nodes again.
    await term(names.length);
    assert.equal(eventsAbout(names).length, names.length, 'still one Event per refused node');
    const second = await eventRequests();
    assert.equal(second['POST 201'] ?? 0, names.length, 'no Event created by the second process');
    assert.equal(second['POST 409'] ?? 0, names.length, 'its creates found each one written');
    assert.equal(second['PATCH 200'] ?? 0, 0, 'none rewritten: each was written moments ago');
  } finally {
    for (const name of names) api.store.delete('nodes', undefined, name);
  }
});

test('a node named with the longest name a Node may have gets an Event the API server takes', async () => {
  // 253 characters, the most a DNS subdomain (a Node's name) may have. The Event's name must be a DNS
  // subdomain of at most 253 too: events.k8s.io/v1 requires it, and so does the simulator (core/v1
  // itself only checks that the name is a path segment).
  const name = `${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(61)}`;
  assert.equal(name.length, 253);
  createNode(name);
  try {
    await term(1);
    const [event] = eventsAbout([name]);
    assert.ok(event, 'the Event was created');
    const eventName = event.metadata.name ?? '';
    assert.ok(eventName.length <= 253, `${eventName.length} characters`);
    assert.match(eventName, /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/);
  } finally {
    api.store.delete('nodes', undefined, name);
  }
});

test('kubectl 1.20 describe node shows the refusal, and get events lists it', async () => {
  const name = 'i-0describe000000001';
  createNode(name);
  const dir = await mkdtemp(join(tmpdir(), 'node-event-fleet-'));
  try {
    await term(1);
    const kubeconfig = join(dir, 'kubeconfig');
    await writeFile(kubeconfig, api.kubeconfig(), { mode: 0o600 });
    const kubectl = async (...args: string[]) =>
      (await run(toolPath('kubectl'), ['--kubeconfig', kubeconfig, ...args], { timeout: 30_000 })).stdout;
    const described = await kubectl('describe', 'node', name);
    const events = described.slice(described.indexOf('Events:'));
    assert.match(
      events,
      new RegExp(`Warning\\s+${identityRejectedReason}\\s+.*kops-controller\\s+not labelling node`),
    );
    const listed = await kubectl(
      'get',
      'events',
      '--field-selector',
      `reason=${identityRejectedReason}`,
      '-o',
      'name',
    );
    assert.match(listed, new RegExp(`^event/${name.replaceAll('.', '\\.')}\\.[0-9a-f]{16}$`, 'm'));
  } finally {
    api.store.delete('nodes', undefined, name);
    await rm(dir, { recursive: true, force: true });
  }
});

test('a fleet of refused nodes writes 50 refusal lines a term at warn, then one line saying the rest are at debug', async () => {
  const names = Array.from({ length: 60 }, (_, i) => `i-0lines${String(i).padStart(9, '0')}`);
  for (const name of names) createNode(name);
  try {
    const { logger, lines } = capturedLogger();
    await term(names.length, logger);
    const messages = lines.map((line) => (JSON.parse(line) as { msg: string }).msg);
    assert.equal(messages.filter((m) => m === 'identity rejected').length, maxRefusalLinesPerTerm);
    assert.equal(
      messages.filter((m) => m.startsWith(`more than ${maxRefusalLinesPerTerm} nodes refused`)).length,
      1,
    );
  } finally {
    for (const name of names) api.store.delete('nodes', undefined, name);
  }
});
