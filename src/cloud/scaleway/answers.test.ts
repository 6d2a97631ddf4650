/**
 * The Scaleway Instance API answering wrongly, over real HTTP (a scripted loopback API): the same
 * server listed twice with different tags, a 200 that is not JSON, instance group tags kops never
 * writes. Each is a fault (`malformed-answer`) or a typed refusal, never another group.
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { Registry } from 'prom-client';
import type { KopsError } from '../../errors.ts';
import { cloudRequests } from '../../testing/cloud-calls.ts';
import { cloudCallMetrics } from '../metrics.ts';
import { type ScriptedAnswer, type ScriptedRequest, startScriptedApi } from '../scripted-api.test-support.ts';
import { createScalewayClients } from './client.ts';
import { ScalewayCloudGroups } from './cloud-groups.ts';
import { ScalewayNodeIdentifier } from './node-identifier.ts';

const cluster = 'prod.example.com';
const project = '11111111-2222-4333-8444-555555555555';
const zone = 'fr-par-1';
const serverId = '0a0b0c0d-1111-4222-8333-444455556666';
const pid = `scaleway://instance/${zone}/${serverId}`;

const closers: Array<() => Promise<void>> = [];
after(async () => {
  for (const close of closers) await close();
});

async function apiAgainst(script: (r: ScriptedRequest) => ScriptedAnswer, registry?: Registry) {
  const api = await startScriptedApi(script);
  closers.push(() => api.close());
  const clients = createScalewayClients({
    credentials: {
      accessKey: 'SCWXXXXXXXXXXXXXXXXX',
      secretKey: '9f8e7d6c-5b4a-4321-8765-432109876543',
      projectId: project,
      zone,
      apiUrl: api.url,
    },
    retries: 0,
    ...(registry ? { calls: cloudCallMetrics(registry) } : {}),
  });
  return {
    api,
    clients,
    identifier: new ScalewayNodeIdentifier({ clients, clusterName: cluster, coalesceWindowMs: 1 }),
  };
}

function server(group: string, id = serverId) {
  return {
    id,
    name: `node-${id.slice(0, 4)}`,
    project,
    organization: project,
    zone,
    state: 'running',
    tags: [`noprefix=kops.k8s.io/cluster=${cluster}`, `noprefix=kops.k8s.io/instance-group=${group}`],
    public_ips: [],
    private_ip: '10.0.0.5',
  };
}

const page = (...servers: unknown[]): ScriptedAnswer => ({
  body: { servers, total_count: servers.length },
});

test('scaleway: the same server listed twice with different tags is identified as neither, and not cached', async () => {
  const { api, identifier } = await apiAgainst(() => page(server('nodes'), server('control-plane-fr-par-1')));
  const result = (await identifier.identify([pid])).get(pid);
  assert.ok(result && !result.ok, JSON.stringify(result));
  assert.equal((result.error as KopsError).kind, 'unavailable');
  assert.equal((result.error as KopsError).reasonCode, 'malformed-answer');
  const before = api.served;
  await identifier.identify([pid]);
  assert.equal(api.served, before + 1, 'read again, not answered from a cache');

  const { identifier: twice, clients: twiceClients } = await apiAgainst(() =>
    page(server('nodes'), server('nodes')),
  );
  const same = (await twice.identify([pid])).get(pid);
  assert.ok(same?.ok, JSON.stringify(same));
  assert.equal(same.identity.instanceGroup, 'nodes');
  const sameGroups = await new ScalewayCloudGroups(twiceClients).list(cluster);
  assert.deepEqual(
    sameGroups.map((g) => [g.instanceGroup, g.members.length]),
    [['nodes', 1]],
    'an identical repeat is one member',
  );
});

test('scaleway: the same server listed twice with different Private NICs is identified as neither', async () => {
  const nic = (id: string) => ({
    id,
    server_id: serverId,
    private_network_id: project,
    mac_address: '02:00:00:00:00:01',
  });
  const first = { ...server('nodes'), private_nics: [nic('0a0b0c0d-1111-4222-8333-000000000001')] };
  const second = { ...server('nodes'), private_nics: [nic('0a0b0c0d-1111-4222-8333-000000000002')] };
  const { api, identifier } = await apiAgainst((r) =>
    r.path.startsWith('/ipam/') ? { body: { total_count: 0, ips: [] } } : page(first, second),
  );
  const result = (await identifier.identify([pid])).get(pid);
  assert.ok(result && !result.ok, JSON.stringify(result));
  assert.equal((result.error as KopsError).reasonCode, 'malformed-answer');
  assert.equal(api.served, 1, 'no IPAM listing for a record that cannot be believed');
});

test('scaleway: cloud groups leave out a server listed twice with different tags', async () => {
  const other = '0a0b0c0d-1111-4222-8333-777777777777';
  const { clients } = await apiAgainst(() =>
    page(server('nodes'), server('nodes', other), server('control-plane-fr-par-1')),
  );
  const groups = await new ScalewayCloudGroups(clients).list(cluster);
  assert.deepEqual(
    groups.map((g) => [g.instanceGroup, g.members.map((m) => m.instanceId)]),
    [['nodes', [other]]],
  );
});

test('scaleway: a 200 that is not JSON is a fault and counted as an error, not ok', async () => {
  const registry = new Registry();
  const { identifier } = await apiAgainst(() => ({ body: '<html>proxy</html>', raw: true }), registry);
  const result = (await identifier.identify([pid])).get(pid);
  assert.ok(result && !result.ok, JSON.stringify(result));
  assert.equal((result.error as KopsError).kind, 'unavailable');
  assert.equal((result.error as KopsError).reasonCode, 'malformed-answer');
  const counted = await cloudRequests(registry);
  assert.equal(counted['scaleway instance.listServers ok'] ?? 0, 0, JSON.stringify(counted));
  assert.equal(counted['scaleway instance.listServers error'], 1, JSON.stringify(counted));
});

test('scaleway: an instance group tag kops never writes is refused with a reason, and no cloud group', async () => {
  for (const group of ['../../config', 'Nodes', 'a'.repeat(64)]) {
    const { identifier, clients } = await apiAgainst(() => page(server(group)));
    const result = (await identifier.identify([pid])).get(pid);
    assert.ok(result && !result.ok, `${group}: ${JSON.stringify(result)}`);
    assert.equal((result.error as KopsError).kind, 'forbidden', group);
    assert.equal((result.error as KopsError).reasonCode, 'invalid-instance-group', group);
    assert.deepEqual(await new ScalewayCloudGroups(clients).list(cluster), [], group);
  }
});

test('scaleway: an IPAM listing that cannot be right is a fault for the node on a Private Network, never an identity without its address', async () => {
  const nic = '0a0b0c0d-1111-4222-8333-888888888888';
  const record = (id: string, address: string) => ({
    id,
    address: `${address}/22`,
    is_ipv6: false,
    project_id: project,
    region: 'fr-par',
    zone: null,
    resource: { type: 'instance_private_nic', id: nic, name: 'node', mac_address: '02:00:00:00:00:01' },
    source: { subnet_id: '0a0b0c0d-1111-4222-8333-999999999999' },
    tags: [],
    reverses: [],
  });
  const onNetwork = {
    ...server('nodes'),
    private_ip: null,
    private_nics: [
      { id: nic, server_id: serverId, private_network_id: project, mac_address: '02:00:00:00:00:01' },
    ],
  };
  const wrong: Array<[string, (query: URLSearchParams) => unknown, string]> = [
    ['no total_count', () => ({ ips: [record('r1', '172.16.0.2')] }), 'malformed-answer'],
    ['no list, though total_count says one', () => ({ total_count: 1 }), 'malformed-answer'],
    ['an impossible total_count', () => ({ total_count: 1e9, ips: [] }), 'malformed-answer'],
    [
      'every page the first one again (the page number ignored)',
      () => ({ total_count: 150, ips: Array.from({ length: 100 }, (_, i) => record(`a${i}`, '172.16.0.2')) }),
      'malformed-answer',
    ],
    [
      'a total_count that changes between pages',
      (q) =>
        q.get('page') === '1'
          ? { total_count: 150, ips: Array.from({ length: 100 }, (_, i) => record(`a${i}`, '172.16.0.2')) }
          : { total_count: 149, ips: [] },
      'listing-changed',
    ],
  ];
  for (const [what, ipam, reason] of wrong) {
    const { identifier } = await apiAgainst((r) =>
      r.path.startsWith('/ipam/') ? { body: ipam(r.query) } : page(onNetwork),
    );
    const result = (await identifier.identify([pid])).get(pid);
    assert.ok(result && !result.ok, `${what}: ${JSON.stringify(result)}`);
    assert.equal((result.error as KopsError).kind, 'unavailable', what);
    assert.equal((result.error as KopsError).reasonCode, reason, what);
  }
  // The same API answering right: the NIC's record is the node's InternalIP.
  const { identifier } = await apiAgainst((r) =>
    r.path.startsWith('/ipam/')
      ? { body: { total_count: 1, ips: [record('r1', '172.16.0.2')] } }
      : page(onNetwork),
  );
  const result = (await identifier.identify([pid])).get(pid);
  assert.ok(result?.ok, JSON.stringify(result));
  assert.deepEqual(
    result.identity.addresses.filter((a) => a.type === 'InternalIP').map((a) => a.address),
    ['172.16.0.2'],
  );
});

test('scaleway: a 200 without its list of servers is a fault, never "not found" for every node or an empty cluster', async () => {
  // The SDK reads a missing `servers` as [] (unmarshalArrayOfObject); the Instance API always says
  // how many match (X-Total-Count, which the SDK's fixLegacyTotalCount copies to total_count).
  for (const answer of [
    { body: {} },
    { body: {}, headers: { 'x-total-count': '1' } },
    { body: { servers: [] }, headers: { 'x-total-count': '1' } },
  ] satisfies ScriptedAnswer[]) {
    const what = JSON.stringify(answer);
    const { identifier, clients } = await apiAgainst(() => answer);
    const result = (await identifier.identify([pid])).get(pid);
    assert.ok(result && !result.ok, what);
    assert.equal(
      (result.error as KopsError).reasonCode,
      'malformed-answer',
      `${what}: ${result.error.message}`,
    );
    await assert.rejects(
      new ScalewayCloudGroups(clients).list(cluster),
      { reasonCode: 'malformed-answer' },
      what,
    );
  }
  // The real shape, with the count in the header only, is read.
  const { identifier, clients } = await apiAgainst(() => ({
    body: { servers: [server('nodes')] },
    headers: { 'x-total-count': '1' },
  }));
  assert.ok((await identifier.identify([pid])).get(pid)?.ok);
  assert.deepEqual(
    (await new ScalewayCloudGroups(clients).list(cluster)).map((g) => g.instanceGroup),
    ['nodes'],
  );
  // A server that does not exist is still "not found": the list is whole and names none.
  const { identifier: none } = await apiAgainst(() => ({
    body: { servers: [] },
    headers: { 'x-total-count': '0' },
  }));
  const missing = (await none.identify([pid])).get(pid);
  assert.ok(missing && !missing.ok);
  assert.equal((missing.error as KopsError).kind, 'not-found');
});
