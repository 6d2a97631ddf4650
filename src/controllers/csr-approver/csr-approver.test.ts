import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { type AddressInfo, connect, createServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { CertificatesV1Api, type KubeConfig } from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import { createAwsClients } from '../../cloud/aws/clients.ts';
import { AwsNodeIdentifier } from '../../cloud/aws/identify.ts';
import { createGceProvider, type GceProvider } from '../../cloud/gce/provider.ts';
import type { NodeIdentifier, NodeIdentity } from '../../cloud/types.ts';
import { UnavailableError } from '../../errors.ts';
import { csrInformer } from '../../kube/shared-informer.ts';
import { buildCsrPem } from '../../pki/csr-build.ts';
import { generateKey } from '../../pki/keys.ts';
import { awsProviderID, simInstanceId } from '../../sim/aws/scenario.ts';
import { type GceDevCluster, startGceDevCluster } from '../../sim/dev-cluster.ts';
import { startAwsDevCluster } from '../../testing/aws-dev-cluster.ts';
import { kubeletClientSigner, kubeletServingSigner } from './checks.ts';
import { CsrApprover } from './csr-approver.ts';
import { type ServingPolicy, servingPolicyOf } from './serving-policy.ts';

const aws = await startAwsDevCluster('csr-approver-', { awsThrottling: false });
const { cluster, store, provider } = aws;

after(() => aws.close());

const [nodeA, nodeB] =
  cluster.nodesByGroup.get('nodes-us-test-1a') ?? cluster.nodesByGroup.get('nodes') ?? [];
assert.ok(nodeA && nodeB, 'the sample cluster has at least two worker nodes in one group');

async function identityOf(node: string): Promise<NodeIdentity> {
  const providerID = store.get('nodes', undefined, node)?.['spec'] as { providerID: string };
  const result = (await provider.nodeIdentifier.identify([providerID.providerID])).get(providerID.providerID);
  assert.ok(result?.ok);
  return result.identity;
}

function nodeUser(node: string) {
  return { name: `system:node:${node}`, groups: ['system:nodes', 'system:authenticated'] };
}

let counter = 0;

/** Creates a CSR through the API as `kubeConfig`'s user, so the API server stamps the requester. */
async function createCsr(
  kubeConfig: KubeConfig,
  options: {
    commonName: string;
    signerName: string;
    usages: string[];
    dnsNames?: string[];
    ipAddresses?: string[];
    expirationSeconds?: number;
  },
): Promise<string> {
  const name = `csr-test-${counter++}`;
  const request = buildCsrPem(generateKey(), {
    subject: { commonName: options.commonName, organizations: ['system:nodes'] },
    ...(options.dnsNames ? { dnsNames: options.dnsNames } : {}),
    ...(options.ipAddresses ? { ipAddresses: options.ipAddresses } : {}),
  });
  await kubeConfig.makeApiClient(CertificatesV1Api).createCertificateSigningRequest({
    body: {
      metadata: { name },
      spec: {
        request: Buffer.from(request).toString('base64'),
        signerName: options.signerName,
        usages: options.usages,
        ...(options.expirationSeconds ? { expirationSeconds: options.expirationSeconds } : {}),
      },
    },
  });
  return name;
}

const clientUsages = ['digital signature', 'client auth'];
const servingUsages = ['digital signature', 'key encipherment', 'server auth'];

interface Condition {
  type: string;
  reason: string;
  message: string;
}

function conditionsOf(name: string, where = store): Condition[] {
  const status = where.get('certificatesigningrequests', undefined, name)?.['status'] as
    | { conditions?: Condition[] }
    | undefined;
  return status?.conditions ?? [];
}

async function decided(name: string, where = store): Promise<Condition> {
  for (let i = 0; i < 1000; i++) {
    const [condition] = conditionsOf(name, where);
    if (condition) return condition;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  assert.fail(`CSR ${name} was never decided`);
}

async function eventually(what: string, check: () => Promise<boolean>): Promise<void> {
  for (let i = 0; i < 1000; i++) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  assert.fail(`timed out waiting until ${what}`);
}

async function metricValue(registry: Registry, labels: Record<string, string>): Promise<number> {
  const metric = await registry.getSingleMetric('kops_controller_csr_approver_decisions_total')?.get();
  const value = metric?.values.find((v) => Object.entries(labels).every(([k, l]) => v.labels[k] === l));
  return value?.value ?? 0;
}

function startApprover(options: {
  leaveUnverifiedForHumans?: boolean;
  registry: Registry;
  identifier?: NodeIdentifier;
  kubeConfig?: KubeConfig;
  maxInstanceStateAgeMs?: number;
  serving?: ServingPolicy;
  resolveName?: (name: string) => Promise<string[]>;
}) {
  const stop = new AbortController();
  const kubeConfig = options.kubeConfig ?? cluster.api.server.kubeConfig();
  const approver = new CsrApprover({
    kubeConfig,
    csrs: csrInformer(kubeConfig),
    ...options,
    identifier: options.identifier ?? provider.nodeIdentifier,
  });
  const running = approver.start(stop.signal);
  return async () => {
    stop.abort();
    await running;
  };
}

describe('CsrApprover when it cannot verify', () => {
  test('a requester with no Node, or a Node without providerID, is denied with that reason', async () => {
    const registry = new Registry();
    const stop = startApprover({ registry });
    try {
      const ghost = await createCsr(cluster.api.server.kubeConfig(nodeUser('ghost-node')), {
        commonName: 'system:node:ghost-node',
        signerName: kubeletClientSigner,
        usages: clientUsages,
      });
      const noNode = await decided(ghost);
      assert.equal(noNode.type, 'Denied');
      assert.equal(noNode.reason, 'NodeNotFound');
      store.create({ apiVersion: 'v1', kind: 'Node', metadata: { name: 'anonymous-node' }, spec: {} });
      const anonymous = await createCsr(cluster.api.server.kubeConfig(nodeUser('anonymous-node')), {
        commonName: 'system:node:anonymous-node',
        signerName: kubeletClientSigner,
        usages: clientUsages,
      });
      const unknown = await decided(anonymous);
      assert.equal(unknown.type, 'Denied');
      assert.equal(unknown.reason, 'NodeIdentityUnknown');
      assert.match(unknown.message, /has no providerID, so the cloud cannot vouch for it/);
    } finally {
      await stop();
    }
  });

  test('while the cloud is down a request stays undecided, and is decided once it is back', async () => {
    let down = true;
    let asked = 0;
    const flaky: NodeIdentifier = {
      identify: async (ids) => {
        asked++;
        if (down) throw new UnavailableError('EC2 is unavailable (simulated outage)');
        return provider.nodeIdentifier.identify(ids);
      },
    };
    const stop = startApprover({ registry: new Registry(), identifier: flaky });
    try {
      const name = await createCsr(cluster.api.server.kubeConfig(nodeUser(nodeA)), {
        commonName: `system:node:${nodeA}`,
        signerName: kubeletClientSigner,
        usages: clientUsages,
      });
      await eventually('the approver retried during the outage', async () => asked >= 2);
      assert.deepEqual(conditionsOf(name), [], 'an outage is never a decision');
      down = false;
      const condition = await decided(name);
      assert.equal(condition.type, 'Approved');
    } finally {
      await stop();
    }
  });
});

describe('CsrApprover when leadership ends during a slow read', () => {
  test('EC2 answering slowly (throttled): the approver stops within a second, deciding nothing', async () => {
    let asked = 0;
    const slow: NodeIdentifier = {
      identify: async (ids, options) => {
        asked++;
        await new Promise((resolve) => setTimeout(resolve, 5_000));
        return provider.nodeIdentifier.identify(ids, options);
      },
    };
    const stop = startApprover({ registry: new Registry(), identifier: slow });
    const name = await createCsr(cluster.api.server.kubeConfig(nodeUser(nodeA)), {
      commonName: `system:node:${nodeA}`,
      signerName: kubeletClientSigner,
      usages: clientUsages,
    });
    await eventually('the lookup is under way', async () => asked > 0);
    const abortedAt = performance.now();
    await stop();
    const ms = performance.now() - abortedAt;
    assert.ok(ms < 1_000, `stopped ${Math.round(ms)} ms after leadership ended`);
    assert.deepEqual(conditionsOf(name), [], 'nothing decided by a stopped approver');
    // Left undecided: gone, so that the approvers of the next tests do not find it.
    store.delete('certificatesigningrequests', undefined, name);
  });
});

describe('CsrApprover asks the cloud for recent state', () => {
  test('every lookup carries the configured bound, 60 s by default', async () => {
    const asked: (number | undefined)[] = [];
    const recording: NodeIdentifier = {
      identify: (ids, options) => {
        asked.push(options?.maxAgeMs);
        return provider.nodeIdentifier.identify(ids, options);
      },
    };
    for (const maxInstanceStateAgeMs of [undefined, 5_000]) {
      const stop = startApprover({
        registry: new Registry(),
        identifier: recording,
        ...(maxInstanceStateAgeMs === undefined ? {} : { maxInstanceStateAgeMs }),
      });
      try {
        const name = await createCsr(cluster.api.server.kubeConfig(nodeUser(nodeA)), {
          commonName: `system:node:${nodeA}`,
          signerName: kubeletClientSigner,
          usages: clientUsages,
        });
        assert.equal((await decided(name)).type, 'Approved');
      } finally {
        await stop();
      }
    }
    assert.deepEqual(asked, [60_000, 5_000]);
  });
});

describe('CsrApprover with leaveUnverifiedForHumans', () => {
  test('a request that fails a check stays pending and is counted, not denied', async () => {
    const registry = new Registry();
    const stop = startApprover({ leaveUnverifiedForHumans: true, registry });
    try {
      const name = await createCsr(cluster.api.server.kubeConfig(nodeUser(nodeA)), {
        commonName: `system:node:${nodeA}`,
        signerName: kubeletServingSigner,
        usages: servingUsages,
        ipAddresses: ['203.0.113.9'],
      });
      const labels = { decision: 'left-pending', reason: 'SubjectAltNamesNotOfInstance' };
      await eventually('the request is counted', async () => (await metricValue(registry, labels)) === 1);
      assert.deepEqual(conditionsOf(name), []);
    } finally {
      await stop();
    }
  });
});

describe('CsrApprover against the simulated cluster', () => {
  const registry = new Registry();
  let stop: (() => Promise<void>) | undefined;
  before(() => {
    stop = startApprover({ registry });
  });
  after(async () => {
    await stop?.();
  });

  test('client renewal by the node itself is approved', async () => {
    const name = await createCsr(cluster.api.server.kubeConfig(nodeUser(nodeA)), {
      commonName: `system:node:${nodeA}`,
      signerName: kubeletClientSigner,
      usages: clientUsages,
    });
    const condition = await decided(name);
    assert.equal(condition.type, 'Approved');
    assert.equal(condition.reason, 'AutoApproved');
    assert.match(condition.message, new RegExp(`node ${nodeA} renews its own kubelet client certificate`));
    const labels = { decision: 'approved', signer: kubeletClientSigner, reason: 'AutoApproved' };
    await eventually('the approval is counted', async () => (await metricValue(registry, labels)) === 1);
  });

  test('client renewal asking for another node is denied', async () => {
    const name = await createCsr(cluster.api.server.kubeConfig(nodeUser(nodeA)), {
      commonName: `system:node:${nodeB}`,
      signerName: kubeletClientSigner,
      usages: clientUsages,
    });
    const condition = await decided(name);
    assert.equal(condition.type, 'Denied');
    assert.equal(condition.reason, 'SubjectIsNotRequester');
    assert.match(
      condition.message,
      new RegExp(`CN=system:node:${nodeB} but was made by system:node:${nodeA}`),
    );
  });

  test('client renewal with a certificate of a terminated instance is denied', async () => {
    // A kubelet credential copied off a machine that has since been terminated must not live on.
    const gone = { id: simInstanceId(77_003), zone: 'us-test-1a' };
    cluster.aws.ec2.addInstances([
      { ...gone, cluster: cluster.clusterName, instanceGroup: 'nodes-us-test-1a', state: 'terminated' },
    ]);
    store.create({
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name: gone.id },
      spec: { providerID: awsProviderID(gone) },
    });
    const name = await createCsr(cluster.api.server.kubeConfig(nodeUser(gone.id)), {
      commonName: `system:node:${gone.id}`,
      signerName: kubeletClientSigner,
      usages: clientUsages,
    });
    const condition = await decided(name);
    assert.equal(condition.type, 'Denied');
    assert.equal(condition.reason, 'InstanceNotRunning');
    assert.match(condition.message, /is terminated, not pending or running/);
  });

  test('serving CSR with the node’s own addresses (per EC2) is approved', async () => {
    const identity = await identityOf(nodeA);
    const ips = identity.addresses.filter((a) => a.type === 'InternalIP').map((a) => a.address);
    const dns = identity.addresses.filter((a) => a.type === 'InternalDNS').map((a) => a.address);
    assert.ok(ips.length && dns.length);
    const name = await createCsr(cluster.api.server.kubeConfig(nodeUser(nodeA)), {
      commonName: `system:node:${nodeA}`,
      signerName: kubeletServingSigner,
      usages: servingUsages,
      dnsNames: [nodeA, ...dns],
      ipAddresses: ips,
    });
    const condition = await decided(name);
    assert.equal(condition.type, 'Approved', condition.message);
    assert.match(condition.message, new RegExp(`every name belongs to instance ${nodeA}`));
  });

  test('serving CSR with a foreign IP is denied, naming the foreign address', async () => {
    const neighbour = (await identityOf(nodeB)).addresses.find((a) => a.type === 'InternalIP')?.address;
    assert.ok(neighbour);
    const name = await createCsr(cluster.api.server.kubeConfig(nodeUser(nodeA)), {
      commonName: `system:node:${nodeA}`,
      signerName: kubeletServingSigner,
      usages: servingUsages,
      dnsNames: [nodeA],
      ipAddresses: [neighbour],
    });
    const condition = await decided(name);
    assert.equal(condition.type, 'Denied');
    assert.equal(condition.reason, 'SubjectAltNamesNotOfInstance');
    assert.match(
      condition.message,
      new RegExp(`${neighbour.replaceAll('.', '\\.')} does not belong to instance ${nodeA}`),
    );
  });

  test('a node whose providerID points at another instance cannot borrow its addresses', async () => {
    // A rogue kubelet registers itself with its neighbour's providerID, then asks for the neighbour's IP.
    const rogue = simInstanceId(77_001);
    const victim = await identityOf(nodeB);
    store.create({
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name: rogue },
      spec: { providerID: awsProviderID({ id: nodeB, zone: victim.zone ?? 'us-test-1a' }) },
    });
    const ip = victim.addresses.find((a) => a.type === 'InternalIP')?.address as string;
    const name = await createCsr(cluster.api.server.kubeConfig(nodeUser(rogue)), {
      commonName: `system:node:${rogue}`,
      signerName: kubeletServingSigner,
      usages: servingUsages,
      ipAddresses: [ip],
    });
    const condition = await decided(name);
    assert.equal(condition.type, 'Denied');
    assert.equal(condition.reason, 'NodeIsNotItsInstance');
  });

  test('an instance of another cluster is refused by the cloud and denied', async () => {
    const outsider = { id: simInstanceId(77_002), zone: 'us-test-1a' };
    cluster.aws.ec2.addInstances([
      {
        ...outsider,
        cluster: 'other.example.com',
        instanceGroup: 'nodes-us-test-1a',
        privateIp: '172.31.0.9',
      },
    ]);
    store.create({
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name: outsider.id },
      spec: { providerID: awsProviderID(outsider) },
    });
    const name = await createCsr(cluster.api.server.kubeConfig(nodeUser(outsider.id)), {
      commonName: `system:node:${outsider.id}`,
      signerName: kubeletServingSigner,
      usages: servingUsages,
      ipAddresses: ['172.31.0.9'],
    });
    const condition = await decided(name);
    assert.equal(condition.type, 'Denied');
    assert.equal(condition.reason, 'InstanceIdentityRejected');
  });

  test('requests from non-nodes are ignored, left to other approvers', async () => {
    const admin = await createCsr(cluster.api.server.kubeConfig(), {
      commonName: `system:node:${nodeA}`,
      signerName: kubeletClientSigner,
      usages: clientUsages,
    });
    cluster.api.server.grant({
      group: 'system:bootstrappers',
      verbs: ['create'],
      resources: ['certificatesigningrequests'],
    });
    const bootstrapper = await createCsr(
      cluster.api.server.kubeConfig({ name: 'system:bootstrap:abcdef', groups: ['system:bootstrappers'] }),
      { commonName: `system:node:${nodeB}`, signerName: kubeletClientSigner, usages: clientUsages },
    );
    // A later request the approver does decide shows that the earlier ones were seen and passed over.
    const marker = await createCsr(cluster.api.server.kubeConfig(nodeUser(nodeB)), {
      commonName: `system:node:${nodeB}`,
      signerName: kubeletClientSigner,
      usages: clientUsages,
    });
    assert.equal((await decided(marker)).type, 'Approved');
    assert.deepEqual(conditionsOf(admin), []);
    assert.deepEqual(conditionsOf(bootstrapper), []);
  });
});

describe("CsrApprover with kubelet-csr-approver's settings", () => {
  /** A resolver over a fixed table: absent names are NXDOMAIN; `failing` names time out. */
  function tableResolver(table: Record<string, string[]>, failing: Set<string> = new Set()) {
    const asked: string[] = [];
    const resolveName = async (name: string) => {
      asked.push(name);
      if (failing.has(name)) throw Object.assign(new Error(`queryA ETIMEOUT ${name}`), { code: 'ETIMEOUT' });
      const addresses = table[name];
      if (!addresses) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${name}`), { code: 'ENOTFOUND' });
      return addresses;
    };
    return { resolveName, asked };
  }

  const servingCsrOfNodeA = async (extra: { expirationSeconds?: number } = {}) => {
    const identity = await identityOf(nodeA);
    const dns = identity.addresses.filter((a) => a.type === 'InternalDNS').map((a) => a.address);
    const ips = identity.addresses.filter((a) => a.type === 'InternalIP').map((a) => a.address);
    assert.ok(dns[0] && ips[0]);
    const name = await createCsr(cluster.api.server.kubeConfig(nodeUser(nodeA)), {
      commonName: `system:node:${nodeA}`,
      signerName: kubeletServingSigner,
      usages: servingUsages,
      dnsNames: dns,
      ipAddresses: ips,
      ...extra,
    });
    return { name, dns: dns[0], ip: ips[0] };
  };

  test('namesMustResolve: a name the resolver does not know is denied; nothing is looked up without it', async () => {
    const { resolveName, asked } = tableResolver({});
    for (const namesMustResolve of [false, true]) {
      const stop = startApprover({
        registry: new Registry(),
        serving: servingPolicyOf({ namesMustResolve }),
        resolveName,
      });
      try {
        const { name, dns } = await servingCsrOfNodeA();
        const condition = await decided(name);
        if (!namesMustResolve) {
          assert.equal(condition.type, 'Approved', condition.message);
          assert.deepEqual(asked, []);
          continue;
        }
        assert.equal(condition.type, 'Denied');
        assert.equal(condition.reason, 'NameDoesNotResolve');
        assert.match(condition.message, new RegExp(`${dns.replace(/\./g, '\\.')} does not resolve`));
      } finally {
        await stop();
      }
    }
  });

  test('namesMustResolve: a resolver failure is an outage (undecided, retried), never a denial', async () => {
    const failing = new Set<string>();
    const table: Record<string, string[]> = {};
    const { resolveName, asked } = tableResolver(table, failing);
    const identity = await identityOf(nodeA);
    const dns = identity.addresses.find((a) => a.type === 'InternalDNS')?.address as string;
    const ip = identity.addresses.find((a) => a.type === 'InternalIP')?.address as string;
    failing.add(dns);
    table[dns] = [ip];
    const stop = startApprover({
      registry: new Registry(),
      serving: servingPolicyOf({ namesMustResolve: true, ipPrefixes: [`${ip}/32`] }),
      resolveName,
    });
    try {
      const { name } = await servingCsrOfNodeA();
      await eventually('the approver retried the lookup', async () => asked.length >= 2);
      assert.deepEqual(conditionsOf(name), [], 'a resolver outage is never a decision');
      failing.delete(dns);
      const condition = await decided(name);
      assert.equal(condition.type, 'Approved', condition.message);
    } finally {
      await stop();
    }
  });

  test('maxExpiration: spec.expirationSeconds above it is denied; at it, approved', async () => {
    const stop = startApprover({
      registry: new Registry(),
      serving: servingPolicyOf({ maxExpiration: 3_600_000 }),
    });
    try {
      const long = await servingCsrOfNodeA({ expirationSeconds: 3601 });
      const denied = await decided(long.name);
      assert.equal(denied.type, 'Denied');
      assert.equal(denied.reason, 'ExpirationTooLong');
      const fits = await servingCsrOfNodeA({ expirationSeconds: 3600 });
      assert.equal((await decided(fits.name)).type, 'Approved');
    } finally {
      await stop();
    }
  });

  test('dnsNamePattern and ipPrefixes deny a request of the node’s own, cloud-verified names that falls outside them', async () => {
    const stop = startApprover({
      registry: new Registry(),
      serving: servingPolicyOf({ dnsNamePattern: 'never\\.example\\.com', ipPrefixes: ['192.0.2.0/24'] }),
    });
    try {
      const { name } = await servingCsrOfNodeA();
      const condition = await decided(name);
      assert.equal(condition.type, 'Denied');
      assert.equal(condition.reason, 'DnsNameNotAllowed');
    } finally {
      await stop();
    }
  });
});

/**
 * A TCP relay on loopback in front of the AWS simulator that can be cut: open connections are reset
 * and new ones refused, as when the controller loses its route to the EC2 endpoint.
 */
async function cuttableRelay(target: string) {
  const { hostname, port } = new URL(target);
  const sockets = new Set<Socket>();
  let cut = false;
  let refused = 0;
  const track = (socket: Socket) => {
    sockets.add(socket);
    socket.on('error', () => undefined);
    socket.on('close', () => sockets.delete(socket));
  };
  const server = createServer((client) => {
    track(client);
    if (cut) {
      refused++;
      client.destroy();
      return;
    }
    const upstream = connect(Number(port), hostname);
    track(upstream);
    client.pipe(upstream).pipe(client);
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    cut() {
      cut = true;
      for (const socket of sockets) socket.destroy();
    },
    restore() {
      cut = false;
    },
    /** Connections refused while cut. */
    get refused() {
      return refused;
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

describe('CsrApprover trusts instance state only while it is fresh', () => {
  // The identifier's cache keeps an identity for an hour (for the NodeController); its clock is ours.
  let clock = Date.now();
  let relay: Awaited<ReturnType<typeof cuttableRelay>>;
  let clients: Awaited<ReturnType<typeof createAwsClients>>;
  let seq = 0;
  /** A running instance of the cluster with its Node, for one test alone. */
  const runningNode = () => {
    const instance = { id: simInstanceId(78_000 + seq++), zone: 'us-test-1a' };
    cluster.aws.ec2.addInstances([
      { ...instance, cluster: cluster.clusterName, instanceGroup: 'nodes-us-test-1a' },
    ]);
    store.create({
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name: instance.id },
      spec: { providerID: awsProviderID(instance) },
    });
    return instance.id;
  };
  const renew = (node: string) =>
    createCsr(cluster.api.server.kubeConfig(nodeUser(node)), {
      commonName: `system:node:${node}`,
      signerName: kubeletClientSigner,
      usages: clientUsages,
    });
  let stop: (() => Promise<void>) | undefined;
  before(async () => {
    relay = await cuttableRelay(cluster.aws.endpoint);
    clients = await createAwsClients({
      region: cluster.region,
      endpoint: relay.url,
      credentials: { ...cluster.aws.credentials },
      maxAttempts: 1,
    });
    const identifier = new AwsNodeIdentifier({
      ec2: clients.ec2,
      clusterName: cluster.clusterName,
      now: () => clock,
    });
    stop = startApprover({ registry: new Registry(), identifier });
  });
  after(async () => {
    await stop?.();
    clients.destroy();
    await relay.close();
  });

  test('an instance terminated after its first approval is not renewed, though the cache still holds it', async () => {
    const node = runningNode();
    assert.equal((await decided(await renew(node))).type, 'Approved');
    // A minute and a half later (well inside the cache's hour) the machine is terminated.
    clock += 90_000;
    cluster.aws.ec2.setInstanceState(node, 'terminated');
    const condition = await decided(await renew(node));
    assert.equal(condition.type, 'Denied', condition.message);
    assert.equal(condition.reason, 'InstanceNotRunning');
    assert.match(condition.message, new RegExp(`instance ${node} is terminated`));
  });

  test('a stopped instance is not renewed either', async () => {
    const node = runningNode();
    assert.equal((await decided(await renew(node))).type, 'Approved');
    clock += 90_000;
    cluster.aws.ec2.setInstanceState(node, 'stopped');
    const condition = await decided(await renew(node));
    assert.equal(condition.type, 'Denied', condition.message);
    assert.equal(condition.reason, 'InstanceNotRunning');
  });

  test('within the bound the cached state serves, beyond it EC2 is asked again', async () => {
    const node = runningNode();
    assert.equal((await decided(await renew(node))).type, 'Approved');
    const before = cluster.aws.calls.count('DescribeInstances');
    clock += 30_000;
    assert.equal((await decided(await renew(node))).type, 'Approved');
    assert.equal(cluster.aws.calls.count('DescribeInstances'), before, 'a 30 s old answer is fresh enough');
    clock += 31_000;
    assert.equal((await decided(await renew(node))).type, 'Approved');
    assert.equal(cluster.aws.calls.count('DescribeInstances'), before + 1, 'a 61 s old answer is read again');
  });

  test('while EC2 is unreachable a renewal with only a stale answer cached stays undecided', async () => {
    const node = runningNode();
    assert.equal((await decided(await renew(node))).type, 'Approved');
    clock += 90_000;
    relay.cut();
    try {
      const before = cluster.aws.calls.count('DescribeInstances');
      const name = await renew(node);
      await eventually('the approver tried EC2 twice', async () => relay.refused >= 2);
      assert.deepEqual(
        conditionsOf(name),
        [],
        'an outage is never a decision, nor an approval from stale state',
      );
      assert.equal(cluster.aws.calls.count('DescribeInstances'), before, 'nothing reached EC2');
      relay.restore();
      assert.equal((await decided(name)).type, 'Approved');
    } finally {
      relay.restore();
    }
  });
});

describe('CsrApprover on GCE reads the instance status for every decision', () => {
  let gceDir: string;
  let gce: GceDevCluster;
  let gceProvider: GceProvider;
  let stop: (() => Promise<void>) | undefined;
  let gceNodes: string[];
  before(async () => {
    gceDir = await mkdtemp(join(tmpdir(), 'csr-approver-gce-'));
    gce = await startGceDevCluster({ stateDir: gceDir });
    gceProvider = await createGceProvider({
      project: gce.project,
      clusterName: gce.clusterName,
      endpoint: gce.gce.endpoint,
      auth: gce.auth,
    });
    gceNodes = [...gce.nodesByGroup.values()].flat();
    stop = startApprover({
      registry: new Registry(),
      identifier: gceProvider.nodeIdentifier,
      kubeConfig: gce.api.server.kubeConfig(),
    });
  });
  after(async () => {
    await stop?.();
    await gce.close();
    await rm(gceDir, { recursive: true, force: true });
  });
  const renew = (node: string) =>
    createCsr(gce.api.server.kubeConfig(nodeUser(node)), {
      commonName: `system:node:${node}`,
      signerName: kubeletClientSigner,
      usages: clientUsages,
    });

  test('an instance terminated after its first approval is not renewed', async () => {
    const node = gceNodes[0] as string;
    const reads = () => gce.gce.count('instances.get');
    const before = reads();
    assert.equal((await decided(await renew(node), gce.api.server.store)).type, 'Approved');
    assert.equal(reads(), before + 1);
    gce.gce.world.updateInstance(gce.zone, node, { status: 'TERMINATED' });
    const condition = await decided(await renew(node), gce.api.server.store);
    assert.equal(condition.type, 'Denied', condition.message);
    assert.equal(condition.reason, 'InstanceNotRunning');
    assert.match(condition.message, new RegExp(`instance ${node} is TERMINATED, not RUNNING`));
    assert.equal(reads(), before + 2, 'the status was read again, not taken from a cache');
  });

  test('while the compute API fails a renewal stays undecided, and is decided once it is back', async () => {
    const node = gceNodes[1] as string;
    assert.equal((await decided(await renew(node), gce.api.server.store)).type, 'Approved');
    const before = gce.gce.count('instances.get');
    gce.gce.failNext(1_000_000, 503);
    try {
      const name = await renew(node);
      await eventually('the approver asked twice', async () => gce.gce.count('instances.get') >= before + 2);
      assert.deepEqual(conditionsOf(name, gce.api.server.store), [], 'an outage is never a decision');
      gce.gce.failNext(0, 503);
      assert.equal((await decided(name, gce.api.server.store)).type, 'Approved');
    } finally {
      gce.gce.failNext(0, 503);
    }
  });

  test('a 403 on the approver’s own compute call (a missing permission) leaves the request undecided, never denied', async () => {
    const node = gceNodes[2] as string;
    const before = gce.gce.count('instances.get');
    gce.gce.failNext(1_000_000, 403, 'instances.get');
    try {
      const name = await renew(node);
      await eventually('the approver asked twice', async () => gce.gce.count('instances.get') >= before + 2);
      assert.deepEqual(
        conditionsOf(name, gce.api.server.store),
        [],
        'the controller’s own 403 is no verdict',
      );
      gce.gce.failNext(0, 403);
      assert.equal((await decided(name, gce.api.server.store)).type, 'Approved');
    } finally {
      gce.gce.failNext(0, 403);
    }
  });
});
