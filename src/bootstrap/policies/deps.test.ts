import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { Registry } from 'prom-client';
import { renewalProof } from '../../agent/renewal.ts';
import { cloudCallMetrics } from '../../cloud/metrics.ts';
import { parseConfig } from '../../config/loader.ts';
import { ConfigError } from '../../errors.ts';
import { makeClients } from '../../kube/client.ts';
import { createCa } from '../../pki/ca.ts';
import { generateKey } from '../../pki/keys.ts';
import { issueCertificate, publicKeyRequest } from '../../pki/profiles.ts';
import { type SimApiServer, startApiServer } from '../../sim/apiserver/index.ts';
import { startAwsSimulator } from '../../sim/aws/server.ts';
import {
  type HetznerSimulator,
  type SimHetznerServer,
  startHetznerSimulator,
} from '../../sim/hetzner/simulator.ts';
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

  /** The renewal of `nodeName`'s current kubelet client certificate, asking for a serving certificate too. */
  async function renew(nodeName: string): Promise<PolicyDecision> {
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
      certificates: { kubelet: publicKeyRequest(key), 'kubelet-server': publicKeyRequest(key) },
    });
    return renewal.evaluate(request, { now: () => new Date() });
  }

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
