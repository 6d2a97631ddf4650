/**
 * The incarnation of a server on the clouds identified by their server records (Hetzner,
 * DigitalOcean, Linode): the identity names the server's id and the creation time its record states,
 * read from each API's real format over real HTTP, so that a name re-used by a new server is told
 * apart from the server a certificate was issued to; and a creation time that cannot be read is a
 * fault, never silently dropped.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { KopsError } from '../errors.ts';
import { startDigitalOceanSimulator } from '../sim/digitalocean/simulator.ts';
import { startHetznerSimulator } from '../sim/hetzner/simulator.ts';
import { startLinodeSimulator } from '../sim/linode/simulator.ts';
import { cloudTime } from './cloud-time.ts';
import { createDigitalOceanProvider } from './digitalocean/provider.ts';
import { createHetznerProvider } from './hetzner/provider.ts';
import { createLinodeProvider } from './linode/provider.ts';
import type { IdentifyResult, NodeIdentifier, NodeIdentity } from './types.ts';

const cluster = 'prod.example.com';
const api = { retries: 1, retryDelayMs: 10 };

/** One cloud under test: its simulator's servers, as the tests handle them, and its identifier. */
interface ServerCloud {
  name: string;
  identifier: NodeIdentifier;
  /** A running server of the cluster named `name`, created at `created` (the API's own spelling). */
  add(name: string, created?: string): number;
  remove(id: number): void;
  /** Puts `value` in the server's record as its creation time, whatever it is. */
  setCreated(id: number, value: unknown): void;
  providerID(id: number): string;
  /** How the API spells 2021-03-01T08:15:30Z. */
  spelling: string;
  /** A spelling this API never writes, which is refused from it. */
  foreignSpelling: string;
}

const clouds: ServerCloud[] = [];
const closers: Array<() => unknown> = [];
const instant = new Date('2021-03-01T08:15:30Z');

before(async () => {
  const hetzner = await startHetznerSimulator();
  const hetznerProvider = createHetznerProvider({
    clusterName: cluster,
    endpoint: hetzner.endpoint,
    token: hetzner.token,
    api,
  });
  closers.push(
    () => hetznerProvider.close(),
    () => hetzner.close(),
  );
  const hetznerLabels = (name: string) => ({
    'kops.k8s.io/cluster': cluster,
    'kops.k8s.io/instance-group': name.replace(/-\d+$/, ''),
  });
  clouds.push({
    name: 'Hetzner',
    identifier: hetznerProvider.nodeIdentifier,
    add: (name, created) =>
      hetzner.addServer({ name, labels: hetznerLabels(name), ...(created ? { created } : {}) }).id,
    remove: (id) => hetzner.servers.delete(id),
    setCreated: (id, value) => Object.assign(hetzner.servers.get(id) as object, { created: value }),
    providerID: (id) => `hcloud://${id}`,
    spelling: '2021-03-01T08:15:30+00:00',
    foreignSpelling: '2021-03-01T08:15:30',
  });

  const digitalocean = await startDigitalOceanSimulator();
  const doProvider = createDigitalOceanProvider({
    clusterName: cluster,
    endpoint: digitalocean.endpoint,
    token: digitalocean.token,
    api,
  });
  closers.push(
    () => doProvider.close(),
    () => digitalocean.close(),
  );
  clouds.push({
    name: 'DigitalOcean',
    identifier: doProvider.nodeIdentifier,
    add: (name, createdAt) =>
      digitalocean.addDroplet({
        name,
        tags: ['KubernetesCluster:prod-example-com', `kops-instancegroup:${name.replace(/-\d+$/, '')}`],
        ...(createdAt ? { createdAt } : {}),
      }).id,
    remove: (id) => digitalocean.droplets.delete(id),
    setCreated: (id, value) => Object.assign(digitalocean.droplets.get(id) as object, { createdAt: value }),
    providerID: (id) => `digitalocean://${id}`,
    spelling: '2021-03-01T08:15:30Z',
    foreignSpelling: '2021-03-01 08:15:30',
  });

  const linode = await startLinodeSimulator();
  const linodeProvider = createLinodeProvider({
    clusterName: cluster,
    origin: linode.origin,
    token: linode.token,
    api: { ...api, maxRetryWaitMs: 100 },
  });
  closers.push(
    () => linodeProvider.close(),
    () => linode.close(),
  );
  clouds.push({
    name: 'Linode',
    identifier: linodeProvider.nodeIdentifier,
    add: (label, created) =>
      linode.addInstance({
        label,
        tags: [`kops.k8s.io/cluster:${cluster}`, `kops.k8s.io/instance-group:${label.replace(/-\d+$/, '')}`],
        ...(created ? { created } : {}),
      }).id,
    remove: (id) => linode.instances.delete(id),
    setCreated: (id, value) => Object.assign(linode.instances.get(id) as object, { created: value }),
    providerID: (id) => `linode://${id}`,
    // Linode writes UTC without an offset (its API reference: `2018-01-01T00:01:01`).
    spelling: '2021-03-01T08:15:30',
    foreignSpelling: '2021-03-01T08:15',
  });
});
after(async () => {
  for (const close of closers.reverse()) await close();
});

function identityOf(result: IdentifyResult | undefined, what: string): NodeIdentity {
  assert.ok(result?.ok, `${what}: ${result && !result.ok ? result.error.message : 'no result'}`);
  return result.identity;
}

async function identifyOne(cloud: ServerCloud, id: number): Promise<IdentifyResult | undefined> {
  const providerID = cloud.providerID(id);
  return (await cloud.identifier.identify([providerID], { maxAgeMs: 0 })).get(providerID);
}

test('the identity carries the server’s incarnation: its id and the creation time its record states, in the API’s own format', async () => {
  for (const cloud of clouds) {
    const id = cloud.add('nodes-a-0', cloud.spelling);
    const identity = identityOf(await identifyOne(cloud, id), cloud.name);
    assert.deepEqual(identity.incarnation, { id: String(id), createdAt: instant }, cloud.name);
  }
});

test('a server re-created under the same name is another incarnation: another id, a later creation time', async () => {
  for (const cloud of clouds) {
    const first = cloud.add('nodes-b-0', cloud.spelling);
    const before = identityOf(await identifyOne(cloud, first), cloud.name);
    cloud.remove(first);
    const second = cloud.add('nodes-b-0');
    const after = identityOf(await identifyOne(cloud, second), cloud.name);
    // The node name (the server's name) is the same; the incarnation is not.
    const hostname = (identity: NodeIdentity) => identity.addresses.find((a) => a.type === 'Hostname');
    assert.deepEqual(hostname(after), hostname(before), cloud.name);
    assert.ok(before.incarnation && after.incarnation, cloud.name);
    assert.notEqual(after.incarnation.id, before.incarnation.id, cloud.name);
    assert.ok(
      (after.incarnation.createdAt?.getTime() ?? 0) > (before.incarnation.createdAt?.getTime() ?? 0),
      cloud.name,
    );
    // The first server is gone: its providerID identifies nothing any more.
    const gone = await identifyOne(cloud, first);
    assert.ok(gone && !gone.ok && gone.error instanceof KopsError, cloud.name);
    assert.equal(gone.error.kind, 'not-found', cloud.name);
  }
});

test('a crowd identified through one listing of the cluster carries each server’s incarnation', async () => {
  for (const cloud of clouds) {
    const ids = [0, 1, 2, 3].map((i) => cloud.add(`nodes-c-${i}`, cloud.spelling));
    const providerIDs = ids.map((id) => cloud.providerID(id));
    const results = await cloud.identifier.identify(providerIDs, { maxAgeMs: 0 });
    for (const [i, id] of ids.entries()) {
      const identity = identityOf(results.get(providerIDs[i] as string), cloud.name);
      assert.deepEqual(identity.incarnation, { id: String(id), createdAt: instant }, cloud.name);
    }
  }
});

test('a creation time that is there but is no time is a malformed answer: a fault, never dropped, never a verdict', async () => {
  for (const cloud of clouds) {
    const id = cloud.add('nodes-d-0', cloud.spelling);
    const bad: unknown[] = ['yesterday', 1772352930, '2021-02-30T08:15:30Z', '', cloud.foreignSpelling, {}];
    for (const value of bad) {
      cloud.setCreated(id, value);
      const result = await identifyOne(cloud, id);
      const what = `${cloud.name}: created ${JSON.stringify(value)}`;
      assert.ok(result && !result.ok && result.error instanceof KopsError, what);
      assert.equal(result.error.kind, 'unavailable', `${what}: ${result.error.message}`);
      assert.equal(result.error.reasonCode, 'malformed-answer', what);
    }
    // Absent (or null) says nothing: the incarnation is the id alone.
    cloud.setCreated(id, null);
    const identity = identityOf(await identifyOne(cloud, id), cloud.name);
    assert.deepEqual(identity.incarnation, { id: String(id) }, cloud.name);
  }
});

test('cloudTime reads RFC 3339 as each cloud writes it, and refuses anything else as a malformed answer', () => {
  const read = (value: unknown, utcWithoutOffset = false) =>
    cloudTime(value, 'the creation time', { utcWithoutOffset })?.toISOString();
  assert.equal(read('2016-01-30T23:55:00+00:00'), '2016-01-30T23:55:00.000Z');
  assert.equal(read('2020-07-21T18:37:44Z'), '2020-07-21T18:37:44.000Z');
  assert.equal(read('2015-08-27T09:49:58-05:00'), '2015-08-27T14:49:58.000Z');
  assert.equal(read('2024-02-29T23:30:00.5+05:30'), '2024-02-29T18:00:00.500Z');
  // ARM's seven fractional digits (azure-rest-api-specs VirtualMachineScaleSetVM_List_MaximumSet_Gen.json).
  assert.equal(read('2021-06-27T01:02:38.3138469+00:00'), '2021-06-27T01:02:38.313Z');
  // Linode's (and sometimes ARM's) UTC without an offset, only where the cloud says so.
  assert.equal(read('2018-01-01T00:01:01', true), '2018-01-01T00:01:01.000Z');
  assert.equal(read(undefined), undefined);
  assert.equal(read(null), undefined);
  const refused = [
    '2018-01-01T00:01:01', // no offset, where the cloud always writes one
    '2018-01-01',
    '2018-01-01 00:01:01Z',
    '2018-01-01t00:01:01z',
    '2021-02-29T00:00:00Z', // not a leap year: Date would make it March 1st
    '2020-04-31T00:00:00Z',
    '2020-01-01T24:00:00Z',
    '2020-01-01T00:60:00Z',
    '2020-01-01T00:00:60Z',
    '2020-13-01T00:00:00Z',
    '2020-01-01T00:00:00+24:00',
    '2020-01-01T00:00:00+05:60',
    'Thu, 01 Jan 2020 00:00:00 GMT',
    '1577836800',
    1577836800,
    true,
    [],
  ];
  for (const value of refused) {
    assert.throws(
      () => read(value),
      (err: unknown) =>
        err instanceof KopsError && err.kind === 'unavailable' && err.reasonCode === 'malformed-answer',
      JSON.stringify(value),
    );
  }
});
