import assert from 'node:assert/strict';
import { after, before, beforeEach, test } from 'node:test';
import { Registry } from 'prom-client';
import { KopsError } from '../errors.ts';
import { type HetznerSimulator, startHetznerSimulator } from '../sim/hetzner/simulator.ts';
import { cloudRequests } from '../testing/cloud-calls.ts';
import { createHetznerProvider, type HetznerProvider } from './hetzner/provider.ts';
import { cloudCallMetrics } from './metrics.ts';

const cluster = 'prod.example.com';
let sim: HetznerSimulator;

before(async () => {
  sim = await startHetznerSimulator();
});
after(() => sim.close());
beforeEach(() => sim.clearCalls());

function provider(registry?: Registry): HetznerProvider {
  return createHetznerProvider({
    clusterName: cluster,
    endpoint: sim.endpoint,
    token: sim.token,
    api: { retries: 1, retryDelayMs: 20 },
    ...(registry ? { cloudCalls: cloudCallMetrics(registry) } : {}),
  });
}

function kindOf(result: { ok: boolean; error?: Error } | undefined): string | undefined {
  return result && !result.ok && result.error instanceof KopsError ? result.error.kind : undefined;
}

test('a server of the cluster is identified from its labels: group, addresses, location', async () => {
  const [server] = sim.addGroup(cluster, 'nodes-fsn1', 1);
  assert.ok(server);
  server.publicIp = '203.0.113.7';
  const p = provider();
  try {
    const id = `hcloud://${server.id}`;
    const result = (await p.nodeIdentifier.identify([id])).get(id);
    assert.ok(result?.ok, JSON.stringify(result));
    assert.equal(result.identity.instanceGroup, 'nodes-fsn1');
    assert.equal(result.identity.instanceId, String(server.id));
    assert.equal(result.identity.state, 'running');
    assert.equal(result.identity.zone, 'fsn1');
    assert.deepEqual(result.identity.addresses, [
      { type: 'InternalIP', address: server.privateIps[0] },
      { type: 'ExternalIP', address: '203.0.113.7' },
      { type: 'Hostname', address: server.name },
    ]);
    assert.equal(sim.count('servers.get'), 1);
  } finally {
    p.close();
  }
});

test('servers that are not this cluster’s running members of a group get no identity', async () => {
  const foreign = sim.addServer({
    labels: { 'kops.k8s.io/cluster': 'other.example.com', 'kops.k8s.io/instance-group': 'nodes' },
  });
  const unlabelled = sim.addServer({});
  const groupless = sim.addServer({ labels: { 'kops.k8s.io/cluster': cluster } });
  const stopped = sim.addServer({
    status: 'off',
    labels: { 'kops.k8s.io/cluster': cluster, 'kops.k8s.io/instance-group': 'nodes' },
  });
  const p = provider();
  try {
    const ids = {
      foreign: `hcloud://${foreign.id}`,
      unlabelled: `hcloud://${unlabelled.id}`,
      groupless: `hcloud://${groupless.id}`,
      stopped: `hcloud://${stopped.id}`,
      deleted: 'hcloud://999999999',
      malformed: 'hcloud://12abc',
      otherCloud: 'aws:///us-east-1a/i-0123',
    };
    // One at a time: each is read by id.
    const got: Record<string, string | undefined> = {};
    for (const [what, id] of Object.entries(ids)) {
      const result = (await p.nodeIdentifier.identify([id])).get(id);
      got[what] = kindOf(result);
      if (what === 'foreign') assert.match((result as { error: Error }).error.message, /other\.example\.com/);
      if (what === 'stopped') assert.match((result as { error: Error }).error.message, /is off, not running/);
    }
    assert.deepEqual(got, {
      foreign: 'forbidden',
      unlabelled: 'forbidden',
      groupless: 'forbidden',
      stopped: 'forbidden',
      deleted: 'not-found',
      malformed: 'invalid',
      otherCloud: 'invalid',
    });
  } finally {
    p.close();
  }
});

test("each refusal says why, so the Cluster API fallback overrides only a missing group, never another cluster's or a stopped server", async () => {
  const foreign = sim.addServer({ labels: { 'kops.k8s.io/cluster': 'other.example.com' } });
  const groupless = sim.addServer({ labels: { 'kops.k8s.io/cluster': cluster } });
  // Stopped and without a group: being stopped is what decides (a Machine must not vouch for it).
  const stoppedGroupless = sim.addServer({ status: 'off', labels: { 'kops.k8s.io/cluster': cluster } });
  const [member] = sim.addGroup(cluster, 'nodes', 1);
  assert.ok(member);
  const p = provider();
  try {
    const reasons: Record<string, unknown> = {};
    for (const [what, server] of Object.entries({ foreign, groupless, stoppedGroupless })) {
      const id = `hcloud://${server.id}`;
      const result = (await p.nodeIdentifier.identify([id])).get(id);
      reasons[what] = result && !result.ok && (result.error as KopsError).details?.['reason'];
    }
    // Read from the cluster's list (a crowd): a server the list does not hold is another cluster's.
    const crowd = [
      `hcloud://${member.id}`,
      `hcloud://${foreign.id}`,
      ...Array.from({ length: 30 }, (_, i) => `hcloud://${900_000 + i}`),
    ];
    const listed = await p.nodeIdentifier.identify(crowd);
    const unlisted = listed.get(`hcloud://${foreign.id}`);
    reasons['unlisted'] = unlisted && !unlisted.ok && (unlisted.error as KopsError).details?.['reason'];
    assert.deepEqual(reasons, {
      foreign: 'foreign-cluster',
      groupless: 'no-instance-group',
      stoppedGroupless: 'not-running',
      unlisted: 'foreign-cluster',
    });
  } finally {
    p.close();
  }
});

test('a crowd of nodes is identified with one paginated list, then from the cache', async () => {
  const servers = sim.addGroup(cluster, 'crowd', 120);
  sim.addGroup('other.example.com', 'crowd', 30);
  const foreign = sim.addServer({
    labels: { 'kops.k8s.io/cluster': 'other.example.com', 'kops.k8s.io/instance-group': 'x' },
  });
  const p = provider();
  try {
    const ids = [...servers.map((s) => `hcloud://${s.id}`), `hcloud://${foreign.id}`];
    const results = await p.nodeIdentifier.identify(ids);
    assert.equal([...results.values()].filter((r) => r.ok).length, 120);
    assert.equal(kindOf(results.get(`hcloud://${foreign.id}`)), 'forbidden');
    // The list lacks the other cluster's server: it is read by itself, and its record refuses it.
    assert.equal(sim.count('servers.get'), 1);
    // The cluster's servers (this test's and the earlier ones') fit in a few 50-server pages.
    const pages = sim.count('servers.list');
    assert.ok(pages >= 3 && pages <= 4, `${pages} pages`);
    for (const call of sim.calls.filter((c) => c.operation === 'servers.list'))
      assert.equal(call.query.get('label_selector'), `kops.k8s.io/cluster=${cluster}`);
    sim.clearCalls();
    await p.nodeIdentifier.identify(ids.slice(0, 120));
    assert.equal(sim.calls.length, 0, 'answered from the cache');
    // A caller deciding trust reads again; two nodes are cheaper read one by one than listed.
    await p.nodeIdentifier.identify(ids.slice(0, 2), { maxAgeMs: 0 });
    assert.equal(sim.count('servers.get'), 2);
    assert.equal(sim.count('servers.list'), 0);
  } finally {
    p.close();
  }
});

test('nodes whose events trickle in after a list are answered from it, not read one by one', async () => {
  const local = await startHetznerSimulator();
  const p = createHetznerProvider({
    clusterName: 't.example.com',
    endpoint: local.endpoint,
    token: local.token,
  });
  try {
    const ids = local.addGroup('t.example.com', 'nodes', 120).map((s) => `hcloud://${s.id}`);
    for (let i = 0; i < ids.length; i += 10) {
      const results = await p.nodeIdentifier.identify(ids.slice(i, i + 10));
      assert.ok([...results.values()].every((r) => r.ok));
    }
    assert.equal(local.count('servers.list'), 3, 'one list of three pages, for the first batch');
    assert.equal(local.count('servers.get'), 0);
  } finally {
    p.close();
    await local.close();
  }
});

test('concurrent callers share one batch', async () => {
  const servers = sim.addGroup(cluster, 'concurrent', 20);
  const p = provider();
  try {
    const all = await Promise.all(servers.map((s) => p.nodeIdentifier.identify([`hcloud://${s.id}`])));
    assert.ok(all.every((m) => [...m.values()][0]?.ok));
    assert.equal(sim.count('servers.get'), 0, 'not one GET per caller');
    assert.ok(sim.count('servers.list') >= 1);
  } finally {
    p.close();
  }
});

test('the API failing is an unavailable error, not a verdict; persistent throttling is a rate-limited error carrying the wait', async () => {
  const [server] = sim.addGroup(cluster, 'faulty', 1);
  const id = `hcloud://${server?.id}`;
  const registry = new Registry();
  const p = provider(registry);
  try {
    sim.fault({ times: 10, status: 503, operation: 'servers.get' });
    const failed = (await p.nodeIdentifier.identify([id], { maxAgeMs: 0 })).get(id);
    assert.equal(kindOf(failed), 'unavailable');
    assert.equal(sim.count('servers.get'), 2, 'one call and one retry');
    sim.clearFaults();

    // Throttled on every try: the wait is not held past the retries, and the error says when to return.
    sim.fault({ times: 10, status: 429, operation: 'servers.get' });
    const throttled = (await p.nodeIdentifier.identify([id], { maxAgeMs: 0 })).get(id);
    sim.clearFaults();
    assert.ok(throttled && !throttled.ok && throttled.error instanceof KopsError);
    assert.equal(throttled.error.kind, 'rate-limited');
    assert.equal(throttled.error.details?.['retryAfterSeconds'], 1);
    const counted = await cloudRequests(registry);
    assert.equal(counted['hetzner servers.get throttled'], 2);
    assert.equal(counted['hetzner servers.get error'], 2);
  } finally {
    p.close();
  }
});

test('a short throttle is waited out and the call succeeds', async () => {
  const [server] = sim.addGroup(cluster, 'throttled', 1);
  const id = `hcloud://${server?.id}`;
  const p = provider();
  try {
    sim.fault({ times: 1, status: 429, operation: 'servers.get' });
    const result = (await p.nodeIdentifier.identify([id], { maxAgeMs: 0 })).get(id);
    assert.ok(result?.ok);
    assert.equal(sim.count('servers.get'), 2);
  } finally {
    p.close();
  }
});

test('cloud groups list the cluster’s servers by instance group', async () => {
  const local = await startHetznerSimulator();
  try {
    local.addGroup('g.example.com', 'control-plane-fsn1', 1);
    local.addGroup('g.example.com', 'nodes', 3)[0]!.status = 'starting';
    local.addGroup('other.example.com', 'nodes', 2);
    const p = createHetznerProvider({
      clusterName: 'g.example.com',
      endpoint: local.endpoint,
      token: local.token,
    });
    try {
      const groups = await p.cloudGroups.list('g.example.com');
      assert.deepEqual(
        groups.map((g) => [g.instanceGroup, g.targetSize, g.members.filter((m) => m.healthy).length]),
        [
          ['control-plane-fsn1', 1, 1],
          ['nodes', 3, 2],
        ],
      );
      assert.match(groups[1]?.members[0]?.providerID ?? '', /^hcloud:\/\/\d+$/);
      await assert.rejects(p.cloudGroups.list('other.example.com'), { kind: 'forbidden' });
    } finally {
      p.close();
    }
  } finally {
    await local.close();
  }
});

test('a caller asking for a fresh read is not answered by a batch in flight that serves from the cache', async () => {
  const [stale, slow] = sim.addGroup(cluster, 'in-flight', 2);
  assert.ok(stale && slow);
  const staleId = `hcloud://${stale.id}`;
  const slowId = `hcloud://${slow.id}`;
  const p = provider();
  try {
    assert.ok((await p.nodeIdentifier.identify([staleId])).get(staleId)?.ok);
    stale.status = 'off';
    // The label controller's batch answers `stale` from the cache and reads `slow`, slowly.
    sim.fault({ times: 1, latencyMs: 300, operation: 'servers.get' });
    const reads = sim.count('servers.get');
    const labels = p.nodeIdentifier.identify([staleId, slowId]);
    while (sim.count('servers.get') === reads) await new Promise((r) => setTimeout(r, 5));
    // While that batch is in flight, two trust decisions ask for a record read now: they share one read.
    const [first, second] = await Promise.all(
      [1, 2].map(async () => (await p.nodeIdentifier.identify([staleId], { maxAgeMs: 0 })).get(staleId)),
    );
    for (const trusted of [first, second]) {
      assert.equal(kindOf(trusted), 'forbidden', JSON.stringify(trusted));
      assert.match((trusted as { error: Error }).error.message, /is off, not running/);
    }
    assert.equal(sim.count('servers.get'), reads + 2, 'the slow read, then one read for both');
    assert.ok((await labels).get(slowId)?.ok);
  } finally {
    p.close();
  }
});

test('a server read as gone is forgotten: callers without an age bound are not told it runs', async () => {
  const [server] = sim.addGroup(cluster, 'deleted', 1);
  assert.ok(server);
  const id = `hcloud://${server.id}`;
  const p = provider();
  try {
    assert.ok((await p.nodeIdentifier.identify([id])).get(id)?.ok);
    sim.servers.delete(server.id);
    assert.equal(kindOf((await p.nodeIdentifier.identify([id], { maxAgeMs: 0 })).get(id)), 'not-found');
    const reads = sim.count('servers.get');
    assert.equal(kindOf((await p.nodeIdentifier.identify([id])).get(id)), 'not-found');
    assert.equal(sim.count('servers.get'), reads + 1, 'read again, not answered from the cache');
  } finally {
    p.close();
  }
});

test('servers a list of the cluster no longer holds are forgotten, asked for or not', async () => {
  const local = await startHetznerSimulator();
  const p = createHetznerProvider({
    clusterName: 'l.example.com',
    endpoint: local.endpoint,
    token: local.token,
  });
  try {
    const [deleted, moved, unasked, kept] = local.addGroup('l.example.com', 'nodes', 4);
    assert.ok(deleted && moved && unasked && kept);
    const ids = [deleted, moved, unasked, kept].map((s) => `hcloud://${s.id}`);
    assert.ok([...(await p.nodeIdentifier.identify(ids)).values()].every((r) => r.ok));
    assert.equal(local.count('servers.list'), 1);
    local.servers.delete(deleted.id);
    moved.labels['kops.k8s.io/cluster'] = 'other.example.com';
    local.servers.delete(unasked.id);
    // Two fresh reads are one list: it holds neither the deleted server nor the one now another
    // cluster's, so each is read by itself, and its own record (or its absence) decides.
    const fresh = await p.nodeIdentifier.identify(ids.slice(0, 2), { maxAgeMs: 0 });
    assert.equal(local.count('servers.list'), 2);
    assert.deepEqual([...fresh.values()].map(kindOf), ['not-found', 'forbidden']);
    // A caller without an age bound has the three the list lacked read again (one more list, then
    // each by itself), not answered from the cache; the one it held is.
    local.clearCalls();
    const later = await p.nodeIdentifier.identify(ids);
    assert.deepEqual([...later.values()].map(kindOf), ['not-found', 'forbidden', 'not-found', undefined]);
    assert.ok(later.get(ids[3] as string)?.ok);
    assert.deepEqual([local.count('servers.list'), local.count('servers.get')], [1, 3]);
  } finally {
    p.close();
    await local.close();
  }
});

test("the cloud refusing the controller's own listing of the cluster (400 to its label selector, 404 from a wrong endpoint) is a fault for every node of the batch, never a verdict on them", async () => {
  const servers = sim.addGroup(cluster, 'refused', 40);
  const crowd = servers.map((s) => `hcloud://${s.id}`);
  for (const status of [400, 404]) {
    const p = provider();
    try {
      sim.fault({ times: 5, status, operation: 'servers.list' });
      const results = await p.nodeIdentifier.identify(crowd);
      const kinds = new Set(crowd.map((id) => kindOf(results.get(id))));
      assert.deepEqual([...kinds], ['unavailable'], `HTTP ${status}: ${[...kinds].join(', ')}`);
    } finally {
      sim.clearFaults();
      p.close();
    }
  }
});

test('an id above int64 (which kops cannot read, and which names no server) is refused before any API call', async () => {
  const p = provider();
  try {
    for (const id of ['hcloud://9223372036854775808', 'hcloud://9999999999999999999']) {
      const result = (await p.nodeIdentifier.identify([id])).get(id);
      assert.equal(kindOf(result), 'invalid', id);
    }
    assert.equal(sim.count('servers.get'), 0);
    const largest = 'hcloud://9223372036854775807';
    assert.equal(kindOf((await p.nodeIdentifier.identify([largest])).get(largest)), 'not-found');
  } finally {
    p.close();
  }
});

test('a server that page-numbered listing skips (one before it deleted between pages) is read by itself and identified, not refused', async () => {
  const local = await startHetznerSimulator();
  const p = createHetznerProvider({
    clusterName: 'skip.example.com',
    endpoint: local.endpoint,
    token: local.token,
  });
  try {
    const servers = local.addGroup('skip.example.com', 'nodes', 120);
    const ids = servers.map((s) => `hcloud://${s.id}`);
    const first = servers[0];
    assert.ok(first);
    // Once page 1 has been answered (and before page 2 can be asked), the first server goes away:
    // page 2 then starts one server later, so the 51st is on no page.
    const identified = p.nodeIdentifier.identify(ids);
    while (local.count('servers.list') === 0) await new Promise((resolve) => setImmediate(resolve));
    local.servers.delete(first.id);
    const results = await identified;
    assert.equal(local.count('servers.list'), 3);
    const skipped = results.get(ids[50] as string);
    assert.ok(skipped?.ok, JSON.stringify(skipped));
    assert.equal(skipped.identity.instanceGroup, 'nodes');
    // The first was on page 1 when it was answered; only the one the list lacked was read by itself.
    assert.equal([...results.values()].filter((r) => r.ok).length, 120);
    assert.deepEqual(
      local.calls.filter((c) => c.operation === 'servers.get').map((c) => c.path),
      [`/v1/servers/${servers[50]?.id}`],
    );
  } finally {
    p.close();
    await local.close();
  }
});

test('a crowd of ids the list lacks costs a bounded number of reads a batch; the rest are a fault, read in a later batch', async () => {
  const local = await startHetznerSimulator();
  const p = createHetznerProvider({
    clusterName: 'strangers.example.com',
    endpoint: local.endpoint,
    token: local.token,
  });
  try {
    const members = local.addGroup('strangers.example.com', 'nodes', 10).map((s) => `hcloud://${s.id}`);
    const strangers = Array.from({ length: 40 }, (_, i) => `hcloud://${800_000 + i}`);
    const first = await p.nodeIdentifier.identify([...members, ...strangers]);
    assert.ok(members.every((id) => first.get(id)?.ok));
    assert.deepEqual([local.count('servers.list'), local.count('servers.get')], [1, 16]);
    const kinds = strangers.map((id) => kindOf(first.get(id)));
    assert.deepEqual(kinds.slice(0, 16), Array(16).fill('not-found'));
    assert.deepEqual(kinds.slice(16), Array(24).fill('unavailable'));
    const left = first.get(strangers[16] as string);
    assert.ok(left && !left.ok);
    assert.equal((left.error as KopsError).details?.['reason'], 'unlisted');
    assert.match(left.error.message, /not in the list of the cluster; 40 such servers in one batch, 16 read/);
    // The next batch (the same crowd asked again) reads 16 more of those it could not read.
    local.clearCalls();
    const second = await p.nodeIdentifier.identify(strangers.slice(16));
    assert.deepEqual([local.count('servers.list'), local.count('servers.get')], [1, 16]);
    assert.deepEqual(
      strangers.slice(16).map((id) => kindOf(second.get(id))),
      [...Array(16).fill('not-found'), ...Array(8).fill('unavailable')],
    );
  } finally {
    p.close();
    await local.close();
  }
});
