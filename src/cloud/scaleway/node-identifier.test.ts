import assert from 'node:assert/strict';
import { after, before, beforeEach, test } from 'node:test';
import type { KopsError } from '../../errors.ts';
import { type ScalewaySimulator, startScalewaySimulator } from '../../sim/scaleway/simulator.ts';
import { simScalewayClients } from '../../testing/scaleway-clients.ts';
import type { ScalewayClients } from './client.ts';
import { ScalewayCloudGroups } from './cloud-groups.ts';
import { ScalewayNodeIdentifier, type ScalewayNodeIdentifierOptions } from './node-identifier.ts';
import { needsUpdateTag } from './server.ts';

const cluster = 'prod.example.com';
let sim: ScalewaySimulator;
let clients: ScalewayClients;
const ids: string[] = [];
let foreign: string;
let untagged: string;

function kopsTags(ig: string, name = cluster): string[] {
  return [
    `noprefix=kops.k8s.io/cluster=${name}`,
    `noprefix=kops.k8s.io/instance-group=${ig}`,
    'noprefix=kops.k8s.io/role=Node',
  ];
}
const pid = (id: string, zone = 'fr-par-1') => `scaleway://instance/${zone}/${id}`;

before(async () => {
  sim = await startScalewaySimulator();
  clients = simScalewayClients(sim);
  for (let i = 0; i < 250; i++) {
    ids.push(
      sim.addServer({
        name: `nodes-${i}`,
        tags: kopsTags(i % 2 ? 'nodes-a' : 'nodes-b'),
        publicIps: ['51.15.0.1'],
      }).id,
    );
  }
  foreign = sim.addServer({ name: 'theirs', tags: kopsTags('nodes', 'other.example.com') }).id;
  untagged = sim.addServer({ name: 'manual', tags: [`noprefix=kops.k8s.io/cluster=${cluster}`] }).id;
});
after(() => sim.close());
beforeEach(() => {
  sim.clearCalls();
  sim.resetFaults();
});

function identifier(options: Partial<ScalewayNodeIdentifierOptions> = {}) {
  return new ScalewayNodeIdentifier({ clients, clusterName: cluster, coalesceWindowMs: 1, ...options });
}

test('a node is identified from its server tags', async () => {
  const result = (await identifier().identify([pid(ids[1] as string)])).get(pid(ids[1] as string));
  assert.ok(result?.ok);
  assert.equal(result.identity.instanceGroup, 'nodes-a');
  assert.equal(result.identity.state, 'running');
  assert.equal(result.identity.zone, 'fr-par-1');
  assert.deepEqual(result.identity.addresses[0], { type: 'ExternalIP', address: '51.15.0.1' });
});

test('servers of another cluster, without a group tag, unknown, elsewhere, or malformed are refused', async () => {
  const asked = [
    pid(foreign),
    pid(untagged),
    pid('00000000-0000-4000-8000-000000000000'),
    pid(ids[0] as string, 'nl-ams-1'),
    'scaleway://fr-par-1/abc',
    `scaleway://instance/fr-par-1/${ids[0]}/x`,
  ];
  const results = await identifier().identify(asked);
  const kinds = asked.map((p) => {
    const r = results.get(p);
    if (!r) return 'missing';
    return r.ok ? 'ok' : (r.error as KopsError).kind;
  });
  assert.deepEqual(kinds, ['forbidden', 'forbidden', 'not-found', 'not-found', 'invalid', 'invalid']);
});

test('only a running or starting server has an identity: locked, stopping or stopped ones are refused', async () => {
  const byState = new Map<string, string>();
  for (const state of ['starting', 'running', 'locked', 'stopping', 'stopped', 'stopped in place']) {
    byState.set(
      state,
      sim.addServer({ name: `s-${state.replace(/ /g, '-')}`, tags: kopsTags('nodes-a'), state }).id,
    );
  }
  try {
    const results = await identifier().identify([...byState.values()].map((id) => pid(id)));
    for (const [state, id] of byState) {
      const result = results.get(pid(id));
      if (state === 'starting' || state === 'running') {
        assert.ok(result?.ok, `${state}: ${result && !result.ok ? result.error.message : 'no result'}`);
        continue;
      }
      assert.ok(result && !result.ok, `${state} was identified`);
      const error = result.error as KopsError;
      assert.equal(error.kind, 'forbidden', state);
      assert.equal(error.reasonCode, 'not-running', state);
      assert.match(error.message, new RegExp(`is ${state}, not running or starting`));
    }
  } finally {
    for (const id of byState.values()) sim.deleteServer(id);
  }
});

test('a label storm reads its servers 100 ids a call, and later reconciles come from the cache', async () => {
  const ident = identifier();
  const answers = await Promise.all(ids.map((id) => ident.identify([pid(id)])));
  assert.ok(answers.every((a) => [...a.values()][0]?.ok));
  assert.equal(sim.count('servers.get'), 0);
  assert.equal(sim.count('servers.list'), 3);
  assert.match(sim.calls[0]?.path ?? '', /servers=[^&]*%2C/);
  sim.clearCalls();
  await Promise.all(ids.slice(0, 40).map((id) => ident.identify([pid(id)])));
  assert.equal(sim.calls.length, 0);
});

test('a trust decision bounds the age of cached records; expired records are read again', async () => {
  let now = 0;
  const ident = identifier({ now: () => now, cacheTtlMs: 1_000 });
  await ident.identify([pid(ids[0] as string)]);
  sim.setState(ids[0] as string, 'stopped');
  now = 500;
  const cached = (await ident.identify([pid(ids[0] as string)])).get(pid(ids[0] as string));
  assert.equal(cached?.ok && cached.identity.state, 'running');
  const strict = (await ident.identify([pid(ids[0] as string)], { maxAgeMs: 100 })).get(
    pid(ids[0] as string),
  );
  assert.equal(strict && !strict.ok && (strict.error as KopsError).reasonCode, 'not-running');
  sim.setState(ids[0] as string, 'running');
  now = 5_000;
  sim.clearCalls();
  await ident.identify([pid(ids[0] as string)]);
  assert.equal(sim.count('servers.list'), 1);
});

test("the API failing or throttling is each node's error (a fault), never an identity", async () => {
  sim.failNext(2, 502, 'servers.list');
  const failed = await identifier().identify(ids.slice(0, 5).map((id) => pid(id)));
  assert.ok([...failed.values()].every((r) => !r.ok && (r.error as KopsError).kind === 'unavailable'));
  sim.throttleNext(2, 1, 'servers.list');
  const throttled = await identifier().identify([pid(ids[7] as string)]);
  assert.equal([...throttled.values()].map((r) => !r.ok && (r.error as KopsError).kind)[0], 'rate-limited');
});

test("cloud groups are the cluster's tagged servers by instance group; needs-update is out of date", async () => {
  const stale = sim.addServer({ name: 'stale', tags: [...kopsTags('nodes-a'), needsUpdateTag] }).id;
  const groups = await new ScalewayCloudGroups(clients).list(cluster);
  const byName = new Map(groups.map((g) => [g.instanceGroup, g]));
  assert.deepEqual([...byName.keys()].sort(), ['nodes-a', 'nodes-b']);
  const a = byName.get('nodes-a');
  assert.ok(a && a.targetSize === a.members.length && a.members.length === 126);
  assert.equal(a.members.find((m) => m.instanceId === stale)?.template === a.template, false);
  assert.equal(a.members.find((m) => m.instanceId === ids[1])?.template, a.template);
  assert.equal(a.members.find((m) => m.instanceId === ids[1])?.providerID, pid(ids[1] as string));
  assert.ok(!groups.some((g) => g.members.some((m) => m.instanceId === foreign)));
  assert.equal(sim.count('servers.list'), 3);
  sim.deleteServer(stale);
});
