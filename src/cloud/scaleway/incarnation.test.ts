/**
 * The incarnation of a Scaleway server: its UUID (the Instance API never gives another server one)
 * and its `creation_date`, read from the Instance API's real answers (ListServers by id, GetServer)
 * through the official SDK over real HTTP. The SDK reads a `creation_date` it cannot parse as none
 * (@scaleway/sdk-client unmarshalDate): the client refuses such an answer as malformed instead, so
 * the time is never silently dropped.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { KopsError } from '../../errors.ts';
import { type ScalewaySimulator, startScalewaySimulator } from '../../sim/scaleway/simulator.ts';
import { assertAnotherIncarnation } from '../../testing/incarnation.ts';
import { simScalewayClients } from '../../testing/scaleway-clients.ts';
import type { IdentifyResult, NodeIdentity } from '../types.ts';
import type { ScalewayClients } from './client.ts';
import { ScalewayNodeIdentifier } from './node-identifier.ts';

const cluster = 'prod.example.com';
const tags = [`noprefix=kops.k8s.io/cluster=${cluster}`, 'noprefix=kops.k8s.io/instance-group=nodes'];
let sim: ScalewaySimulator;
let clients: ScalewayClients;

before(async () => {
  sim = await startScalewaySimulator();
  clients = simScalewayClients(sim);
});
after(() => sim.close());

const pid = (id: string) => `scaleway://instance/${sim.zone}/${id}`;

/** A fresh identifier (nothing cached), so each call reads the API. */
async function identify(id: string): Promise<IdentifyResult | undefined> {
  const identifier = new ScalewayNodeIdentifier({ clients, clusterName: cluster, coalesceWindowMs: 1 });
  return (await identifier.identify([pid(id)])).get(pid(id));
}

function identityOf(result: IdentifyResult | undefined): NodeIdentity {
  assert.ok(result?.ok, result && !result.ok ? result.error.message : 'no result');
  return result.identity;
}

test('the identity carries the server’s incarnation: its UUID and creation_date, as the Instance API writes it', async () => {
  const server = sim.addServer({
    name: 'nodes-one',
    tags,
    publicIps: ['51.15.0.7'],
    creationDate: '2025-06-10T15:30:12.563745+00:00',
  });
  assert.deepEqual(identityOf(await identify(server.id)).incarnation, {
    id: server.id,
    createdAt: new Date('2025-06-10T15:30:12.563Z'),
  });
});

test('a server re-created under its name is another incarnation: another UUID, a later creation time', async () => {
  const first = sim.addServer({
    name: 'nodes-reborn',
    tags,
    creationDate: '2024-01-01T00:00:00.000000+00:00',
  });
  const before = identityOf(await identify(first.id));
  sim.deleteServer(first.id);
  const second = sim.addServer({ name: 'nodes-reborn', tags });
  const after = identityOf(await identify(second.id));
  assertAnotherIncarnation(before, after);
  const gone = await identify(first.id);
  assert.ok(gone && !gone.ok && gone.error instanceof KopsError);
  assert.equal(gone.error.kind, 'not-found');
});

test('a creation_date that is there but no time is a malformed answer, which the SDK alone would drop: a fault, never a verdict', async () => {
  const server = sim.addServer({ name: 'nodes-bad-time', tags });
  for (const value of ['in a while', '2021-02-29T00:00:00+00:00', '2021-03-01T00:00:00', 1614556800, '']) {
    server.creationDate = value;
    const result = await identify(server.id);
    const what = `creation_date ${JSON.stringify(value)}`;
    assert.ok(result && !result.ok && result.error instanceof KopsError, what);
    assert.equal(result.error.kind, 'unavailable', `${what}: ${result.error.message}`);
    assert.equal(result.error.reasonCode, 'malformed-answer', what);
    // The same through GetServer, which the bootstrap policy reads.
    const read = await clients
      .call('instance.getServer', () => clients.instance.getServer({ zone: sim.zone, serverId: server.id }))
      .then(
        () => undefined,
        (err: unknown) => err,
      );
    assert.ok(read instanceof KopsError && read.reasonCode === 'malformed-answer', `${what}: GetServer`);
  }
  // Absent (null, as for a server the API has no date for) says nothing: the incarnation is the UUID.
  server.creationDate = null;
  assert.deepEqual(identityOf(await identify(server.id)).incarnation, { id: server.id });
});
