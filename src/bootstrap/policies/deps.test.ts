import assert from 'node:assert/strict';
import { generateKeyPairSync, X509Certificate } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { Registry } from 'prom-client';
import { renewalProof } from '../../agent/renewal.ts';
import { HostRegistry, hostNamespace, newHostObject } from '../../cloud/metal/hosts.ts';
import { inventoryPath } from '../../cloud/metal/inventory.ts';
import { cloudCallMetrics } from '../../cloud/metrics.ts';
import { parseConfig } from '../../config/loader.ts';
import type { Config } from '../../config/schema.ts';
import { ConfigError } from '../../errors.ts';
import { makeClients } from '../../kube/client.ts';
import { type CertificateAuthority, createCa } from '../../pki/ca.ts';
import { generateKey } from '../../pki/keys.ts';
import { issueCertificate, publicKeyRequest } from '../../pki/profiles.ts';
import { type SimApiServer, startApiServer } from '../../sim/apiserver/index.ts';
import { startAwsSimulator } from '../../sim/aws/server.ts';
import {
  type HetznerSimulator,
  type SimHetznerServer,
  startHetznerSimulator,
} from '../../sim/hetzner/simulator.ts';
import { clearMemfs, MemfsVfs } from '../../statestore/memfs-vfs.ts';
import { testRequest } from '../../testing/bootstrap-request.ts';
import { cloudRequests } from '../../testing/cloud-calls.ts';
import { isDependencyFault } from '../dependency.ts';
import { ConfigMapReplayGuard, MemoryReplayGuard } from '../replay-guard.ts';
import type { BootstrapPolicy, PolicyDecision } from '../types.ts';
import { buildPolicies } from './build.ts';
import { policyDepsFromConfig, policyNamesOf } from './deps.ts';

test('a queue-only chain needs no cloud and no apiserver', async () => {
  const config = parseConfig({
    clusterName: 'c',
    cloud: 'aws',
    bootstrap: { policies: [{ name: 'queue' }] },
  });
  const { deps, close } = await policyDepsFromConfig({ config });
  assert.equal(deps.aws, undefined);
  assert.equal(deps.tokens, undefined);
  assert.ok(deps.replayGuard instanceof MemoryReplayGuard);
  close();
});

test('the kops aws default gets the account from STS (counted) and builds against the simulator', async () => {
  const sim = await startAwsSimulator({ throttling: false });
  try {
    const config = parseConfig({
      clusterName: 'c.example.com',
      cloud: 'aws',
      server: { provider: { aws: { nodesRoles: ['nodes.c.example.com'], Region: sim.region } } },
    });
    const registry = new Registry();
    const { deps, close } = await policyDepsFromConfig({
      config,
      cloud: { aws: { endpoint: sim.endpoint, credentials: sim.credentials } },
      cloudCalls: cloudCallMetrics(registry),
      ca: createCa(),
    });
    try {
      assert.deepEqual(await cloudRequests(registry), { 'aws GetCallerIdentity ok': 1 });
      assert.ok(deps.cloudCalls, 'the policies count their own calls on the same recorder');
      assert.equal(deps.aws?.account, sim.account);
      assert.equal(deps.aws?.partition, 'aws');
      assert.deepEqual(
        (await buildPolicies(config, deps)).map((p) => p.name),
        ['aws', 'renewal'],
      );
    } finally {
      close();
    }
  } finally {
    await sim.close();
  }
});

test('with an apiserver: tokens for bootstrap-token and metal, replay markers in the configured namespace', async () => {
  const api = await startApiServer();
  try {
    const core = makeClients(api.kubeConfig()).core;
    const config = parseConfig({
      clusterName: 'c',
      cloud: 'metal',
      bootstrap: { policies: [{ name: 'bootstrap-token' }], replayNamespace: 'kops-system' },
    });
    const { deps } = await policyDepsFromConfig({ config, core });
    assert.ok(deps.tokens);
    assert.ok(deps.replayGuard instanceof ConfigMapReplayGuard);
  } finally {
    await api.close();
  }
});

test('metal without a state store, pki-tpm without the API server are configuration errors; webhook verifiers count as used', async () => {
  const config = parseConfig({
    clusterName: 'c',
    cloud: 'metal',
    bootstrap: { policies: [{ name: 'metal' }] },
  });
  await assert.rejects(policyDepsFromConfig({ config }), ConfigError);
  await assert.rejects(
    policyDepsFromConfig({ config: parseConfig({ clusterName: 'c', cloud: 'metal', server: { pki: {} } }) }),
    /pki-tpm needs the Kubernetes API/,
  );
  const webhook = parseConfig({
    clusterName: 'c',
    cloud: 'aws',
    bootstrap: {
      policies: [
        { name: 'webhook', url: 'https://h/', caFile: 'a', certFile: 'b', keyFile: 'c', verifiedBy: 'metal' },
      ],
    },
  });
  assert.deepEqual([...policyNamesOf(webhook)], ['webhook', 'metal']);
});

/**
 * The decision of `renewal` on a renewal of `nodeName`'s current kubelet client certificate (from
 * `ca`), asking for a serving certificate too unless `clientOnly`.
 */
async function renewalDecision(
  renewal: BootstrapPolicy,
  ca: CertificateAuthority,
  clusterName: string,
  nodeName: string,
  options: { clientOnly?: boolean } = {},
): Promise<PolicyDecision> {
  const key = generateKey('ecdsa-p256');
  const identity = { name: nodeName, dnsNames: [], ipAddresses: [] };
  const certificate = new X509Certificate(
    issueCertificate(ca, 'kubelet', publicKeyRequest(key), identity).pem,
  );
  const body = Buffer.from('{"renew":true}');
  const header = (await renewalProof({ nodeName, certificate, key }, clusterName)(body)) as string;
  const request = testRequest({
    body,
    proof: { kind: 'node-renewal', token: header.split(' ')[1] as string },
    certificates: {
      kubelet: publicKeyRequest(key),
      ...(options.clientOnly ? {} : { 'kubelet-server': publicKeyRequest(key) }),
    },
  });
  return renewal.evaluate(request, { now: () => new Date() });
}

describe("the renewal policy's address source as the controller wires it: the Node read, then the cloud", () => {
  const clusterName = 'c.example.com';
  const ca = createCa();
  let api: SimApiServer;
  let hetzner: HetznerSimulator;
  let server: SimHetznerServer;
  let renewal: BootstrapPolicy;
  let release: () => void;

  before(async () => {
    [api, hetzner] = await Promise.all([startApiServer(), startHetznerSimulator()]);
    server = hetzner.addGroup(clusterName, 'nodes', 1)[0] as SimHetznerServer;
    const config = parseConfig({
      clusterName,
      cloud: 'hetzner',
      bootstrap: { policies: [{ name: 'renewal' }] },
    });
    const { deps, close } = await policyDepsFromConfig({
      config,
      core: makeClients(api.kubeConfig()).core,
      kubeConfig: api.kubeConfig(),
      ca,
      cloud: { hetzner: { endpoint: hetzner.endpoint, token: hetzner.token } },
      renewalNodeReadTimeoutMs: 1_000,
    });
    release = close;
    renewal = (await buildPolicies(config, deps)).find((p) => p.name === 'renewal') as BootstrapPolicy;
  });
  after(async () => {
    release();
    await Promise.all([api.close(), hetzner.close()]);
  });

  const renew = (nodeName: string) => renewalDecision(renewal, ca, clusterName, nodeName);

  function registerNode(name: string, providerID: string): void {
    api.store.create({ apiVersion: 'v1', kind: 'Node', metadata: { name }, spec: { providerID } });
  }

  test("a node renews with its instance's addresses from the cloud", async () => {
    registerNode(server.name, `hcloud://${server.id}`);
    const decision = await renew(server.name);
    assert.equal(decision.verdict, 'approve', JSON.stringify(decision));
    assert.deepEqual(decision.facts.ipAddresses, server.privateIps);
  });

  test("attack: node-z registered with another node's providerID is refused, not certified for that instance's addresses", async () => {
    registerNode('node-z', `hcloud://${server.id}`);
    const decision = await renew('node-z');
    assert.equal(decision.verdict, 'deny', JSON.stringify(decision));
    assert.match(decision.reasons.join(), new RegExp(`node node-z is not a name of instance ${server.id}`));
  });

  test('a renewal of a node whose Node was deleted is refused (403), not a fault retried for ever', async () => {
    const decision = await renew('node-gone');
    assert.equal(decision.verdict, 'deny', JSON.stringify(decision));
    assert.match(
      decision.reasons.join(),
      /cloud does not vouch for node node-gone: node node-gone is not registered/,
    );
  });

  test('the API server failing or not answering the Node read in time is a fault of kubernetes-api (503), never a refusal', async () => {
    registerNode('node-slow', `hcloud://${server.id}`);
    api.faults.errors({ resource: 'nodes', verbs: ['get'], status: 503, count: 1 });
    await assert.rejects(renew('node-slow'), (err) => {
      assert.ok(isDependencyFault(err), String(err));
      assert.equal(err.dependency, 'kubernetes-api');
      return true;
    });
    api.faults.latency(10_000, { resource: 'nodes', verbs: ['get'] });
    const started = Date.now();
    try {
      await assert.rejects(renew('node-slow'), (err) => {
        assert.ok(isDependencyFault(err), String(err));
        assert.equal(err.dependency, 'kubernetes-api');
        return true;
      });
      assert.ok(Date.now() - started < 5_000, `the read's deadline: ${Date.now() - started} ms`);
    } finally {
      api.faults.latency(0, { resource: 'nodes', verbs: ['get'] });
    }
  });
});

describe('renewal of hosts without a providerID (kops metal, and hosts enrolled beside a cloud), as the controller wires it', () => {
  const clusterName = 'm.example.com';
  const ca = createCa();
  const authority = 'deps-metal-renewal';
  const stateStore = () => new MemfsVfs(new URL(`memfs://${authority}/cluster`));
  let api: SimApiServer;
  let hetzner: HetznerSimulator;
  const releases: (() => void)[] = [];

  before(async () => {
    [api, hetzner] = await Promise.all([startApiServer(), startHetznerSimulator()]);
    await makeClients(api.kubeConfig()).core.createNamespace({ body: { metadata: { name: hostNamespace } } });
    await new HostRegistry(api.kubeConfig()).create(
      newHostObject({
        name: 'host-1',
        instanceGroup: 'nodes',
        publicKey: generateKeyPairSync('ec', { namedCurve: 'prime256v1' })
          .publicKey.export({ format: 'pem', type: 'spki' })
          .toString(),
      }),
    );
  });
  after(async () => {
    for (const release of releases) release();
    clearMemfs(authority);
    await Promise.all([api.close(), hetzner.close()]);
  });

  /** The renewal policy of `config`, built by policyDepsFromConfig and buildPolicies. */
  async function renewalOf(config: Config): Promise<BootstrapPolicy> {
    const { deps, close } = await policyDepsFromConfig({
      config,
      core: makeClients(api.kubeConfig()).core,
      kubeConfig: api.kubeConfig(),
      ca,
      stateStore: stateStore(),
      cloud: { hetzner: { endpoint: hetzner.endpoint, token: hetzner.token } },
    });
    releases.push(close);
    return (await buildPolicies(config, deps)).find((p) => p.name === 'renewal') as BootstrapPolicy;
  }

  function registerNode(name: string, providerID?: string): void {
    api.store.create({
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name },
      ...(providerID ? { spec: { providerID } } : {}),
    });
  }

  test("kops' Metal feature flag on a cloud ([pki-tpm, renewal] on hetzner): a Node without a providerID renews on its Host, client only; one with a providerID through the cloud", async () => {
    const server = hetzner.addGroup(clusterName, 'nodes', 1)[0] as SimHetznerServer;
    const renewal = await renewalOf(
      parseConfig({
        clusterName,
        cloud: 'hetzner',
        bootstrap: { policies: [{ name: 'pki-tpm' }, { name: 'renewal' }] },
      }),
    );
    registerNode('host-1');
    registerNode(server.name, `hcloud://${server.id}`);

    const metal = await renewalDecision(renewal, ca, clusterName, 'host-1');
    assert.equal(metal.verdict, 'approve', JSON.stringify(metal));
    assert.deepEqual([metal.facts.dnsNames, metal.facts.ipAddresses], [[], []]);
    assert.equal(metal.facts.instanceGroup, 'nodes');
    const cloud = await renewalDecision(renewal, ca, clusterName, server.name);
    assert.equal(cloud.verdict, 'approve', JSON.stringify(cloud));
    assert.deepEqual(cloud.facts.ipAddresses, server.privateIps);
    // A Node without a providerID whose name no Host bears is refused: nothing vouches for it.
    registerNode('stray');
    const stray = await renewalDecision(renewal, ca, clusterName, 'stray', { clientOnly: true });
    assert.equal(stray.verdict, 'deny', JSON.stringify(stray));
    assert.match(stray.reasons.join(), /node stray is enrolled nowhere: no Host kops-system\/stray/);
  });

  test('metal with a chain that enrols no machine ([bootstrap-token, renewal]): without an inventory client certificates renew; once one exists, it decides', async () => {
    const renewal = await renewalOf(
      parseConfig({
        clusterName,
        cloud: 'metal',
        configBase: `memfs://${authority}/cluster`,
        bootstrap: { policies: [{ name: 'bootstrap-token' }, { name: 'renewal' }] },
      }),
    );
    registerNode('token-node');
    const unchecked = await renewalDecision(renewal, ca, clusterName, 'token-node', { clientOnly: true });
    assert.equal(unchecked.verdict, 'approve', JSON.stringify(unchecked));
    assert.deepEqual([unchecked.facts.dnsNames, unchecked.facts.ipAddresses], [[], []]);

    await stateStore().write(
      inventoryPath,
      'hosts:\n- {name: listed, instanceGroup: nodes, addresses: [10.3.0.1]}\n',
    );
    registerNode('listed');
    const listed = await renewalDecision(renewal, ca, clusterName, 'listed');
    assert.equal(listed.verdict, 'approve', JSON.stringify(listed));
    assert.deepEqual(listed.facts.ipAddresses, ['10.3.0.1']);
    const unlisted = await renewalDecision(renewal, ca, clusterName, 'token-node', { clientOnly: true });
    assert.equal(unlisted.verdict, 'deny', JSON.stringify(unlisted));
    assert.match(
      unlisted.reasons.join(),
      /node token-node is enrolled nowhere: the metal inventory .* does not list it/,
    );
  });

  test("attack: on metal a Node whose kubelet wrote another host's providerID renews into its own entry only, never that host's addresses", async () => {
    await stateStore().write(
      inventoryPath,
      [
        'hosts:',
        '- {name: victim, instanceGroup: nodes, addresses: [10.3.0.7], providerID: "metal://rack1-u7"}',
        '- {name: thief, instanceGroup: nodes, addresses: [10.3.0.8]}',
      ].join('\n'),
    );
    const renewal = await renewalOf(
      parseConfig({
        clusterName,
        cloud: 'metal',
        configBase: `memfs://${authority}/cluster`,
        server: { pki: {} },
      }),
    );
    registerNode('thief', 'metal://rack1-u7');
    const decision = await renewalDecision(renewal, ca, clusterName, 'thief');
    assert.equal(decision.verdict, 'approve', JSON.stringify(decision));
    assert.deepEqual(decision.facts.ipAddresses, ['10.3.0.8']);
  });

  test('metal with the inventory policy ([metal, renewal]) and no inventory: a fault of the state store (503), never a refusal', async () => {
    clearMemfs(authority);
    const renewal = await renewalOf(
      parseConfig({
        clusterName,
        cloud: 'metal',
        configBase: `memfs://${authority}/cluster`,
        bootstrap: { policies: [{ name: 'metal' }, { name: 'renewal' }] },
      }),
    );
    registerNode('inventory-node');
    await assert.rejects(renewalDecision(renewal, ca, clusterName, 'inventory-node'), (err) => {
      assert.ok(isDependencyFault(err), String(err));
      assert.equal(err.dependency, 'state-store');
      return true;
    });
  });
});
