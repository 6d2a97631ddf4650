/**
 * Cloud IPAM end to end through the simulators, one cloud each: a machine joins (AWS: the real
 * bootstrap server, `aws` policy and `join`), its Node registers as its kubelet would, and the IPAM
 * controller gives it the pod range its cloud routes to it.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Registry } from 'prom-client';
import { createAwsClients } from '../../cloud/aws/clients.ts';
import { AwsNodeIdentifier } from '../../cloud/aws/identify.ts';
import { GceNodeIdentifier } from '../../cloud/gce/node-identifier.ts';
import { hostGroup, hostNamespace, hostVersion } from '../../cloud/metal/hosts.ts';
import { nodeInformer } from '../../kube/shared-informer.ts';
import { type KubeObject, type SimApiServer, startApiServer } from '../../sim/apiserver/index.ts';
import { awsProviderID, simIpv6Prefix } from '../../sim/aws/scenario.ts';
import { simulatorCompute } from '../../sim/gce/clients.ts';
import { type GceSimulator, startGceSimulator } from '../../sim/gce/simulator.ts';
import { type BootstrapHarness, startBootstrapHarness } from '../../testing/bootstrap-harness.ts';
import { IpamController } from './ipam-controller.ts';
import { AwsPodCidrSource, GcePodCidrSource, HostPodCidrSource, type PodCidrSource } from './sources.ts';

/** Runs an IPAM controller with `source` against `api` until the returned stopper is called. */
function runIpam(api: SimApiServer, source: PodCidrSource): () => Promise<void> {
  const stop = new AbortController();
  const running = new IpamController({
    kubeConfig: api.kubeConfig(),
    nodes: nodeInformer(api.kubeConfig()),
    source,
    registry: new Registry(),
  }).start(stop.signal);
  return async () => {
    stop.abort();
    await running;
  };
}

function registerNode(api: SimApiServer, name: string, providerID?: string): void {
  api.store.create({
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name, labels: { 'kubernetes.io/hostname': name } },
    spec: providerID ? { providerID } : {},
  } as KubeObject);
}

async function podCidrsOf(api: SimApiServer, name: string): Promise<string[]> {
  for (let i = 0; i < 1000; i++) {
    const spec = api.store.get('nodes', undefined, name)?.['spec'] as { podCIDRs?: string[] } | undefined;
    if (spec?.podCIDRs) return spec.podCIDRs;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  assert.fail(`node ${name} got no podCIDRs`);
}

describe('AWS: a machine joins and its node gets the IPv6 prefix of its ENI', () => {
  let harness: BootstrapHarness;
  let stopIpam: () => Promise<void>;
  let closeClients: () => void;
  before(async () => {
    harness = await startBootstrapHarness();
    const clients = await createAwsClients({
      region: harness.aws.region,
      endpoint: harness.aws.endpoint,
      credentials: harness.aws.credentials,
    });
    closeClients = clients.destroy;
    const identifier = new AwsNodeIdentifier({ ec2: clients.ec2, clusterName: harness.clusterName });
    stopIpam = runIpam(harness.api, new AwsPodCidrSource(identifier));
  });
  after(async () => {
    await stopIpam();
    closeClients();
    await harness.close();
  });

  test('join, register, podCIDRs', async () => {
    const machine = harness.addNode();
    const instance = harness.aws.ec2.instance(machine.instanceId);
    assert.ok(instance);
    instance.ipv6Prefixes = [simIpv6Prefix(4242)];
    const joined = await harness.join(machine);
    assert.equal(joined.nodeName, machine.instanceId);
    registerNode(harness.api, joined.nodeName, awsProviderID(instance));
    assert.deepEqual(await podCidrsOf(harness.api, joined.nodeName), [simIpv6Prefix(4242)]);
  });
});

describe('GCE: a node gets the external IPv6 range of its instance', () => {
  let api: SimApiServer;
  let gce: GceSimulator;
  before(async () => {
    [api, gce] = await Promise.all([startApiServer(), startGceSimulator({ project: 'kops-v6' })]);
  });
  after(async () => {
    await Promise.all([api.close(), gce.close()]);
  });

  test('register, podCIDRs', async () => {
    const clusterName = 'v6-gce.example.com';
    const zone = 'us-central1-a';
    const [instance] = gce.world.seedInstanceGroup({
      zone,
      instanceGroup: 'nodes',
      count: 1,
      clusterName,
      externalIpv6: true,
    });
    assert.ok(instance?.externalIpv6Range);
    const identifier = new GceNodeIdentifier({ compute: simulatorCompute(gce), clusterName });
    const stop = runIpam(api, new GcePodCidrSource(identifier));
    try {
      registerNode(api, instance.name, `gce://kops-v6/${zone}/${instance.name}`);
      assert.deepEqual(await podCidrsOf(api, instance.name), [instance.externalIpv6Range]);
    } finally {
      await stop();
    }
  });
});

describe('metal: a node gets the podCIDRs of its Host', () => {
  let api: SimApiServer;
  before(async () => {
    api = await startApiServer();
  });
  after(() => api.close());

  test('host, register, podCIDRs', async () => {
    api.store.create({
      apiVersion: 'v1',
      kind: 'Namespace',
      metadata: { name: hostNamespace },
    } as KubeObject);
    api.store.create({
      apiVersion: `${hostGroup}/${hostVersion}`,
      kind: 'Host',
      metadata: { name: 'rack1-host3', namespace: hostNamespace },
      spec: {
        instanceGroup: 'nodes',
        publicKey: 'unused here',
        podCIDRs: ['10.244.3.0/24', 'fd00:10:244:3::/64'],
      },
    } as KubeObject);
    const stop = runIpam(api, new HostPodCidrSource({ kubeConfig: api.kubeConfig() }));
    try {
      registerNode(api, 'rack1-host3');
      assert.deepEqual(await podCidrsOf(api, 'rack1-host3'), ['10.244.3.0/24', 'fd00:10:244:3::/64']);
    } finally {
      await stop();
    }
  });
});
