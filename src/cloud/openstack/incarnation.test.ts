/**
 * The incarnation of an OpenStack server: its UUID (Nova never gives another server one) and its
 * `created`, read from Nova's real answers (`servers.get`, `servers/detail`) over real HTTP through
 * the production client. A server re-created under its name is another incarnation.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { KopsError } from '../../errors.ts';
import {
  type OpenStackSimulator,
  type SeedServer,
  startOpenStackSimulator,
} from '../../sim/openstack/simulator.ts';
import { assertAnotherIncarnation } from '../../testing/incarnation.ts';
import type { IdentifyResult, NodeIdentity } from '../types.ts';
import { KeystoneSession } from './keystone.ts';
import { OpenStackNodeIdentifier } from './node-identifier.ts';
import { NovaClient } from './nova.ts';

const cluster = 'prod.example.com';
let sim: OpenStackSimulator;
let nova: NovaClient;

before(async () => {
  sim = await startOpenStackSimulator();
  nova = new NovaClient({
    session: new KeystoneSession({ auth: sim.passwordAuth }),
    retries: 1,
    retryDelayMs: 1,
  });
});
after(() => sim.close());

/** A fresh identifier (no snapshot kept), so each call reads Nova. */
const identifier = () => new OpenStackNodeIdentifier({ nova, clusterName: cluster, coalesceWindowMs: 1 });

function kopsServer(name: string, extra: Partial<SeedServer> = {}): SeedServer {
  return {
    name,
    fixed: ['10.1.0.9'],
    metadata: { KubernetesCluster: cluster, KopsInstanceGroup: 'nodes' },
    ...extra,
  };
}

async function identify(id: string): Promise<IdentifyResult | undefined> {
  return (await identifier().identify([`openstack://${id}`])).get(`openstack://${id}`);
}

function identityOf(result: IdentifyResult | undefined): NodeIdentity {
  assert.ok(result?.ok, result && !result.ok ? result.error.message : 'no result');
  return result.identity;
}

test('the identity carries the server’s incarnation: its UUID and `created`, read by id and through the listing', async () => {
  const one = sim.addServer(kopsServer('nodes-one', { created: '2012-08-20T21:11:09Z' }));
  assert.deepEqual(identityOf(await identify(one.id)).incarnation, {
    id: one.id,
    createdAt: new Date('2012-08-20T21:11:09Z'),
  });
  // More servers than the identifier reads one by one: the project's listing answers them.
  const crowd = [1, 2, 3, 4, 5].map((i) => sim.addServer(kopsServer(`nodes-crowd-${i}`)));
  const results = await identifier().identify(crowd.map((s) => `openstack://${s.id}`));
  for (const server of crowd) {
    const identity = identityOf(results.get(`openstack://${server.id}`));
    assert.deepEqual(identity.incarnation, { id: server.id, createdAt: new Date(server.created as string) });
  }
});

test('a server re-created under its name is another incarnation: another UUID, a later creation time', async () => {
  const first = sim.addServer(kopsServer('nodes-reborn', { created: '2020-01-01T00:00:00Z' }));
  const before = identityOf(await identify(first.id));
  sim.deleteServer(first.id);
  const second = sim.addServer(kopsServer('nodes-reborn'));
  const after = identityOf(await identify(second.id));
  assertAnotherIncarnation(before, after);
  const gone = await identify(first.id);
  assert.ok(gone && !gone.ok && gone.error instanceof KopsError);
  assert.equal(gone.error.kind, 'not-found');
});

test('a `created` with an offset other than Z, or none (the API reference makes it optional: UTC), is read; an absent one leaves the UUID alone', async () => {
  const offset = sim.addServer(kopsServer('nodes-offset', { created: '2015-08-27T09:49:58-05:00' }));
  assert.equal(
    identityOf(await identify(offset.id)).incarnation?.createdAt?.toISOString(),
    '2015-08-27T14:49:58.000Z',
  );
  const bare = sim.addServer(kopsServer('nodes-bare', { created: '2015-08-27T09:49:58' }));
  assert.equal(
    identityOf(await identify(bare.id)).incarnation?.createdAt?.toISOString(),
    '2015-08-27T09:49:58.000Z',
  );
  const none = sim.addServer(kopsServer('nodes-none', { created: undefined }));
  assert.deepEqual(identityOf(await identify(none.id)).incarnation, { id: none.id });
});

test('a `created` that is there but no time is a malformed answer: a fault, never a verdict, never dropped', async () => {
  for (const created of ['soon', '2021-02-29T00:00:00Z', 1345497069, '', ['2012-08-20T21:11:09Z']]) {
    const server = sim.addServer(kopsServer(`nodes-bad-${String(created).length}`, { created }));
    const result = await identify(server.id);
    const what = `created ${JSON.stringify(created)}`;
    assert.ok(result && !result.ok && result.error instanceof KopsError, what);
    assert.equal(result.error.kind, 'unavailable', `${what}: ${result.error.message}`);
    assert.equal(result.error.reasonCode, 'malformed-answer', what);
    sim.deleteServer(server.id);
  }
});
