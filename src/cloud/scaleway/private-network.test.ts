/**
 * A kops node on a Scaleway Private Network. kops' Scaleway servers have routed IPs, so the Instance
 * record's legacy `private_ip` is null, and the Scaleway cloud controller manager gives the Node the
 * IPv4 addresses IPAM lists for the server's Private NICs as InternalIP
 * (scaleway/scaleway-cloud-controller-manager scaleway/instances.go instanceAddresses,
 * getPrivateNetworkAddresses: `ListIPs` with `resource_type=instance_private_nic`, the NIC's id,
 * `is_ipv6=false`). The kubelet asks for those in its serving certificate, so the node's identity
 * must carry them: read in batches (one IPAM listing per ListServers call), each record checked to be
 * attached to one of the server's own NICs, and IPAM failing is a fault, never fewer addresses.
 */

import assert from 'node:assert/strict';
import { after, before, beforeEach, test } from 'node:test';
import { CertificatesV1Api } from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import { isCloudVerdict } from '../../bootstrap/dependency.ts';
import { kubeletServingSigner } from '../../controllers/csr-approver/checks.ts';
import { CsrApprover } from '../../controllers/csr-approver/csr-approver.ts';
import type { KopsError } from '../../errors.ts';
import { csrInformer } from '../../kube/shared-informer.ts';
import { buildCsrPem } from '../../pki/csr-build.ts';
import { generateKey } from '../../pki/keys.ts';
import { type SimApiServer, startApiServer } from '../../sim/apiserver/index.ts';
import { type ScalewaySimulator, startScalewaySimulator } from '../../sim/scaleway/simulator.ts';
import { simScalewayClients } from '../../testing/scaleway-clients.ts';
import { createScalewayClients, type ScalewayClients } from './client.ts';
import { ScalewayNodeIdentifier, type ScalewayNodeIdentifierOptions } from './node-identifier.ts';
import { scalewayProviderID } from './server.ts';

const cluster = 'prod.example.com';
const tags = [`noprefix=kops.k8s.io/cluster=${cluster}`, 'noprefix=kops.k8s.io/instance-group=nodes-a'];
const theirTags = [
  'noprefix=kops.k8s.io/cluster=other.example.com',
  'noprefix=kops.k8s.io/instance-group=nodes',
];
let sim: ScalewaySimulator;
let clients: ScalewayClients;

before(async () => {
  sim = await startScalewaySimulator();
  clients = simScalewayClients(sim);
});
after(() => sim.close());
beforeEach(() => {
  sim.resetFaults();
  sim.clearCalls();
  sim.ignoreIpamFilters([]);
});

const pid = (id: string) => scalewayProviderID({ zone: sim.zone, id });

function identifier(options: Partial<ScalewayNodeIdentifierOptions> = {}) {
  return new ScalewayNodeIdentifier({ clients, clusterName: cluster, coalesceWindowMs: 1, ...options });
}

/** The InternalIP addresses of the identity of server `id`, or the error there is instead. */
async function internalIPsOf(ident: ScalewayNodeIdentifier, id: string): Promise<string[]> {
  const result = (await ident.identify([pid(id)])).get(pid(id));
  assert.ok(result?.ok, JSON.stringify(result && !result.ok ? result.error.message : result));
  return result.identity.addresses.filter((a) => a.type === 'InternalIP').map((a) => a.address);
}

let csrs = 0;

/** A kubelet serving CSR of `node`, created through the API as the node, as the kubelet does. */
async function createKubeletServingCsr(
  api: SimApiServer,
  node: string,
  sans: { dnsNames: string[]; ipAddresses: string[] },
): Promise<string> {
  const name = `serving-${csrs++}`;
  const request = buildCsrPem(generateKey(), {
    subject: { commonName: `system:node:${node}`, organizations: ['system:nodes'] },
    ...sans,
  });
  const asNode = api.kubeConfig({
    name: `system:node:${node}`,
    groups: ['system:nodes', 'system:authenticated'],
  });
  await asNode.makeApiClient(CertificatesV1Api).createCertificateSigningRequest({
    body: {
      metadata: { name },
      spec: {
        request: Buffer.from(request).toString('base64'),
        signerName: kubeletServingSigner,
        usages: ['digital signature', 'key encipherment', 'server auth'],
      },
    },
  });
  return name;
}

/** The approver's decision on CSR `name`, once it is written. */
async function decisionOf(api: SimApiServer, name: string) {
  for (let i = 0; i < 1000; i++) {
    const status = api.store.get('certificatesigningrequests', undefined, name)?.['status'] as
      | { conditions?: Array<{ type: string; reason: string; message: string }> }
      | undefined;
    const [condition] = status?.conditions ?? [];
    if (condition) return condition;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  assert.fail(`CSR ${name} was never decided`);
}

test('a node on a Private Network whose serving CSR names its IPAM address is approved; one naming a neighbour’s is denied', async () => {
  const node = sim.addServer({ name: 'nodes-a-1', tags, privateIps: ['172.16.4.2'] });
  sim.addServer({ name: 'nodes-a-2', tags, privateIps: ['172.16.4.3'] });
  const api: SimApiServer = await startApiServer();
  const stop = new AbortController();
  let running: Promise<void> | undefined;
  try {
    api.store.create({
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name: node.name },
      spec: { providerID: pid(node.id) },
    });
    const kubeConfig = api.kubeConfig();
    running = new CsrApprover({
      kubeConfig,
      csrs: csrInformer(kubeConfig),
      identifier: identifier(),
      registry: new Registry(),
    }).start(stop.signal);
    // What the kubelet asks for: the Node's Hostname and InternalIP, as the CCM set them.
    const own = await createKubeletServingCsr(api, node.name, {
      dnsNames: [node.name],
      ipAddresses: ['172.16.4.2'],
    });
    const approved = await decisionOf(api, own);
    assert.equal(approved.type, 'Approved', approved.message);
    assert.match(approved.message, new RegExp(`every name belongs to instance ${node.id}`));
    const borrowed = await createKubeletServingCsr(api, node.name, {
      dnsNames: [node.name],
      ipAddresses: ['172.16.4.3'],
    });
    const denied = await decisionOf(api, borrowed);
    assert.equal(denied.type, 'Denied', denied.message);
    assert.equal(denied.reason, 'SubjectAltNamesNotOfInstance');
    assert.match(denied.message, /172\.16\.4\.3 does not belong to instance/);
  } finally {
    stop.abort();
    await running;
    await api.close();
  }
});

test('every Private NIC’s IPv4 addresses are InternalIP, as the CCM reports them; no IPv6, no public IP as internal', async () => {
  const server = sim.addServer({
    name: 'two-networks',
    tags,
    privateIps: ['172.16.4.10', 'fd5f:519c:6d46:2728::10'],
    privateNics: [{ ips: ['10.20.0.5'] }],
    publicIps: ['51.15.0.10'],
  });
  const ident = identifier();
  assert.deepEqual(await internalIPsOf(ident, server.id), ['172.16.4.10', '10.20.0.5']);
  const result = (await ident.identify([pid(server.id)])).get(pid(server.id));
  assert.ok(result?.ok);
  assert.deepEqual(
    result.identity.addresses.filter((a) => a.type === 'ExternalIP').map((a) => a.address),
    ['51.15.0.10'],
  );
  // One listing, by the server's NIC ids, of IPv4 Private-NIC records in our project.
  const queries = sim.calls
    .filter((c) => c.operation === 'ips.list')
    .map((c) => new URL(c.path, 'http://x').searchParams);
  assert.equal(queries.length, 1);
  assert.equal(queries[0]?.get('resource_type'), 'instance_private_nic');
  assert.deepEqual(queries[0]?.getAll('resource_ids').sort(), server.privateNics.map((n) => n.id).sort());
  assert.equal(queries[0]?.get('is_ipv6'), 'false');
  assert.equal(queries[0]?.get('project_id'), sim.projectId);
  assert.equal(queries[0]?.get('zonal'), null);
});

test("attack: an IPAM record attached to another server's NIC is never taken, even when IPAM answers more than was asked", async () => {
  // Another cluster's server first, so an IPAM that ignores the filters lists its records first.
  sim.addServer({ name: 'theirs', tags: theirTags, privateIps: ['172.16.5.9'] });
  const mine = sim.addServer({ name: 'mine', tags, privateIps: ['172.16.5.2'] });
  const neighbour = sim.addServer({ name: 'neighbour', tags, privateIps: ['172.16.5.3'] });
  sim.ignoreIpamFilters(['resource_ids', 'resource_type', 'project_id', 'is_ipv6']);
  const ident = identifier();
  const [a, b] = await Promise.all([internalIPsOf(ident, mine.id), internalIPsOf(ident, neighbour.id)]);
  assert.deepEqual(a, ['172.16.5.2']);
  assert.deepEqual(b, ['172.16.5.3']);
  assert.equal(sim.count('ips.list'), 1, 'one listing for the batch of both');
});

test('IPAM failing, throttling or not answering is a fault for every identity that needs it, never fewer addresses; nothing is cached', async () => {
  const servers = [0, 1, 2].map((i) =>
    sim.addServer({ name: `pn-${i}`, tags, privateIps: [`172.16.6.${i + 2}`] }),
  );
  // A server with no Private NIC has no IPAM addresses for the CCM to report: its identity does not
  // rest on the listing, which is not even asked for it.
  const noNic = sim.addServer({ name: 'no-nic', tags, publicIps: ['51.15.0.30'] });
  const asked = [...servers.map((s) => pid(s.id)), pid(noNic.id)];
  const slow = createScalewayClients({
    credentials: sim.credentials,
    timeoutMs: 100,
    retries: 1,
    retryDelayMs: 1,
  });
  for (const [what, inject, ident] of [
    ['503', () => sim.failNext(2, 503, 'ips.list'), identifier()],
    ['429', () => sim.throttleNext(2, 1, 'ips.list'), identifier()],
    ['dropped', () => sim.dropNext(2, 'ips.list'), identifier()],
    ['timeout', () => sim.delayNext(2, 1_000, 'ips.list'), identifier({ clients: slow })],
  ] as const) {
    sim.resetFaults();
    inject();
    const results = await ident.identify(asked);
    for (const server of servers) {
      const result = results.get(pid(server.id));
      assert.ok(result && !result.ok, `${what}: ${server.name} was identified without its IPAM addresses`);
      assert.ok(!isCloudVerdict(result.error), `${what}: ${result.error.message} is a verdict`);
      assert.ok(
        ['unavailable', 'rate-limited', 'timeout'].includes((result.error as KopsError).kind),
        `${what}: ${(result.error as KopsError).kind}`,
      );
    }
    assert.ok(results.get(pid(noNic.id))?.ok, `${what}: the server without a Private NIC`);
    // Not cached: the next call reads the servers and IPAM again, and gets the addresses.
    sim.resetFaults();
    sim.clearCalls();
    assert.deepEqual(await internalIPsOf(ident, servers[0]?.id as string), ['172.16.6.2']);
    assert.equal(sim.count('servers.list'), 1, what);
    assert.equal(sim.count('ips.list'), 1, what);
  }
});

test('a storm of 250 nodes on a Private Network costs one IPAM listing per ListServers call, and later reconciles nothing', async () => {
  const local = await startScalewaySimulator();
  try {
    const storm = createScalewayClients({ credentials: local.credentials, retryDelayMs: 1, retries: 1 });
    const ids: string[] = [];
    for (let i = 0; i < 250; i++) {
      ids.push(local.addServer({ name: `storm-${i}`, tags, privateIps: [`10.1.${i >> 8}.${i & 255}`] }).id);
    }
    const ident = new ScalewayNodeIdentifier({ clients: storm, clusterName: cluster, coalesceWindowMs: 1 });
    const providerID = (id: string) => scalewayProviderID({ zone: local.zone, id });
    const answers = await Promise.all(ids.map((id) => ident.identify([providerID(id)])));
    answers.forEach((answer, i) => {
      const result = answer.get(providerID(ids[i] as string));
      assert.ok(result?.ok, `storm-${i}`);
      assert.deepEqual(
        result.identity.addresses.filter((a) => a.type === 'InternalIP').map((a) => a.address),
        [`10.1.${i >> 8}.${i & 255}`],
      );
    });
    assert.equal(local.count('servers.list'), 3);
    assert.equal(local.count('ips.list'), 3);
    local.clearCalls();
    await Promise.all(ids.slice(0, 40).map((id) => ident.identify([providerID(id)])));
    assert.equal(local.calls.length, 0, 'answered from the cache, addresses and all');
  } finally {
    await local.close();
  }
});

test('an IPAM listing longer than a page is read to its end, and a batch with more than 100 NICs is listed 100 NIC ids at a time', async () => {
  // 60 servers whose Private NIC holds two IPv4 addresses: 120 records for 60 NICs, two pages of 100.
  const paged = Array.from({ length: 60 }, (_, i) =>
    sim.addServer({ name: `paged-${i}`, tags, privateIps: [`10.2.0.${i}`, `10.3.0.${i}`] }),
  );
  // 60 servers with two Private NICs each: 120 NIC ids, two listings (100 and 20 ids) of a page each.
  const twoNics = Array.from({ length: 60 }, (_, i) =>
    sim.addServer({
      name: `nics-${i}`,
      tags,
      privateIps: [`10.4.0.${i}`],
      privateNics: [{ ips: [`10.5.0.${i}`] }],
    }),
  );
  const queries = () =>
    sim.calls.filter((c) => c.operation === 'ips.list').map((c) => new URL(c.path, 'http://x').searchParams);
  for (const [servers, addressesOf, expected] of [
    [
      paged,
      (i: number) => [`10.2.0.${i}`, `10.3.0.${i}`],
      [
        ['1', 60],
        ['2', 60],
      ],
    ],
    [
      twoNics,
      (i: number) => [`10.4.0.${i}`, `10.5.0.${i}`],
      [
        ['1', 100],
        ['1', 20],
      ],
    ],
  ] as const) {
    sim.clearCalls();
    const results = await identifier().identify(servers.map((s) => pid(s.id)));
    servers.forEach((server, i) => {
      const result = results.get(pid(server.id));
      assert.ok(result?.ok, server.name);
      assert.deepEqual(
        result.identity.addresses.filter((a) => a.type === 'InternalIP').map((a) => a.address),
        addressesOf(i),
      );
    });
    assert.equal(sim.count('servers.list'), 1);
    assert.deepEqual(
      queries().map((q) => [q.get('page'), q.getAll('resource_ids').length]),
      expected,
    );
  }
});
