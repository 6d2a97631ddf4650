import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Registry } from 'prom-client';
import type { AwsIdentifyResult, AwsNodeIdentifier } from '../../cloud/aws/identify.ts';
import type { Outcome } from '../../cloud/batcher.ts';
import { GceNodeIdentifier } from '../../cloud/gce/node-identifier.ts';
import { hostGroup, hostNamespace, hostVersion } from '../../cloud/metal/hosts.ts';
import { ForbiddenError } from '../../errors.ts';
import { type KubeObject, type SimApiServer, startApiServer } from '../../sim/apiserver/index.ts';
import { simulatorCompute } from '../../sim/gce/clients.ts';
import { type GceSimulator, startGceSimulator } from '../../sim/gce/simulator.ts';
import type { CloudPodRanges } from './pod-ranges.ts';
import { AwsPodCidrSource, type CloudAnswer, GcePodCidrSource, HostPodCidrSource } from './sources.ts';

function rangesOf(outcome: Outcome<CloudAnswer> | undefined): CloudPodRanges {
  assert.ok(outcome?.ok, `expected an answer, got ${outcome?.ok === false ? outcome.error.message : 'none'}`);
  return outcome.value.ranges;
}

describe('AWS source', () => {
  const identity = (prefixes: string[]): AwsIdentifyResult => ({
    ok: true,
    identity: {
      providerID: 'aws:///us-east-1a/i-1',
      instanceId: 'i-1',
      instanceGroup: 'nodes',
      state: 'running',
      addresses: [],
      networkInterfaces: [{ networkInterfaceId: 'eni-1', ipv6Prefixes: prefixes }],
    },
  });

  test('an instance without a prefix in a cached record is read again from EC2, once', async () => {
    const asked: (number | undefined)[] = [];
    const identifier: Pick<AwsNodeIdentifier, 'identify'> = {
      identify: async (ids, options) => {
        asked.push(options?.maxAgeMs);
        const fresh = options?.maxAgeMs === 0;
        return new Map(ids.map((id) => [id, identity(fresh ? ['2600:1f13::/80'] : [])]));
      },
    };
    const answers = await new AwsPodCidrSource(identifier).lookup(['aws:///us-east-1a/i-1']);
    assert.deepEqual(rangesOf(answers.get('aws:///us-east-1a/i-1')), {
      kind: 'ranges',
      cidrs: ['2600:1f13::/80'],
    });
    assert.deepEqual(asked, [undefined, 0]);
  });

  test("the identifier's refusal is passed on as it is", async () => {
    const refusal = new ForbiddenError('instance i-1 does not belong to cluster x');
    const identifier: Pick<AwsNodeIdentifier, 'identify'> = {
      identify: async (ids) => new Map(ids.map((id) => [id, { ok: false, error: refusal }])),
    };
    const answer = (await new AwsPodCidrSource(identifier).lookup(['aws:///us-east-1a/i-1'])).get(
      'aws:///us-east-1a/i-1',
    );
    assert.deepEqual(answer, { ok: false, error: refusal });
  });
});

describe('GCE source against the simulator', () => {
  const zone = 'us-central1-a';
  const cluster = 'v6.example.com';
  let sim: GceSimulator;
  before(async () => {
    sim = await startGceSimulator({ project: 'kops-v6' });
  });
  after(() => sim.close());

  test("each node's external IPv6 range, read with its identity in batched calls", async () => {
    const instances = sim.world.seedInstanceGroup({
      zone,
      instanceGroup: 'nodes',
      count: 20,
      clusterName: cluster,
      externalIpv6: true,
    });
    const source = new GcePodCidrSource(
      new GceNodeIdentifier({ compute: simulatorCompute(sim), clusterName: cluster, coalesceWindowMs: 5 }),
    );
    sim.clearCalls();
    const ids = instances.map((i) => `gce://kops-v6/${zone}/${i.name}`);
    const answers = await Promise.all(ids.map((id) => source.lookup([id])));
    for (const [i, instance] of instances.entries()) {
      assert.deepEqual(rangesOf(answers[i]?.get(ids[i] as string)), {
        kind: 'ranges',
        cidrs: [instance.externalIpv6Range as string],
      });
    }
    const computeCalls = sim.calls.filter((c) => c.operation !== 'token').length;
    assert.ok(computeCalls <= 5, `${computeCalls} compute calls for 20 nodes`);
  });

  test('an instance of another cluster is refused, not given a range', async () => {
    const [foreign] = sim.world.seedInstanceGroup({
      zone,
      instanceGroup: 'nodes-x',
      count: 1,
      clusterName: 'other.example.com',
      externalIpv6: true,
    });
    const id = `gce://kops-v6/${zone}/${foreign?.name}`;
    const source = new GcePodCidrSource(
      new GceNodeIdentifier({ compute: simulatorCompute(sim), clusterName: cluster, coalesceWindowMs: 1 }),
    );
    const answer = (await source.lookup([id])).get(id);
    assert.equal(answer?.ok, false);
    assert.equal((answer as { error: { kind?: string } }).error.kind, 'forbidden');
  });
});

describe('metal source (Host records) against the simulated API server', () => {
  let api: SimApiServer;
  before(async () => {
    api = await startApiServer();
    api.store.create({
      apiVersion: 'v1',
      kind: 'Namespace',
      metadata: { name: hostNamespace },
    } as KubeObject);
    for (const [name, podCIDRs] of [
      ['h1', ['10.1.0.0/24']],
      ['h2', undefined],
      // Not what the CRD's schema allows: an answer of a broken API server.
      ['h-string', '10.3.0.0/24'],
      ['h-number', 5],
    ] as const) {
      api.store.create({
        apiVersion: `${hostGroup}/${hostVersion}`,
        kind: 'Host',
        metadata: { name, namespace: hostNamespace },
        spec: { instanceGroup: 'nodes', publicKey: 'unused here', ...(podCIDRs ? { podCIDRs } : {}) },
      } as KubeObject);
    }
  });
  after(() => api.close());

  test("each node's Host podCIDRs by node name, from a watch; a later edit is seen", async () => {
    const source = new HostPodCidrSource({ kubeConfig: api.kubeConfig() });
    source.start();
    try {
      const answers = await source.lookup(['h1', 'h2', 'h3']);
      assert.deepEqual(rangesOf(answers.get('h1')), { kind: 'ranges', cidrs: ['10.1.0.0/24'] });
      assert.equal(rangesOf(answers.get('h2')).kind, 'none');
      assert.match(
        (rangesOf(answers.get('h3')) as { reason: string }).reason,
        /no Host record names node h3/,
      );
      api.store.mutate('hosts', hostNamespace, 'h2', (host) => {
        (host['spec'] as Record<string, unknown>)['podCIDRs'] = ['10.2.0.0/24'];
      });
      for (let i = 0; i < 500 && rangesOf((await source.lookup(['h2'])).get('h2')).kind === 'none'; i++) {
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      assert.deepEqual(rangesOf((await source.lookup(['h2'])).get('h2')), {
        kind: 'ranges',
        cidrs: ['10.2.0.0/24'],
      });
    } finally {
      await source.stop();
    }
  });

  test('a Host whose podCIDRs is not a list of strings is skipped (counted), never read as ranges', async () => {
    const registry = new Registry();
    const source = new HostPodCidrSource({ kubeConfig: api.kubeConfig(), registry });
    source.start();
    try {
      const answers = await source.lookup(['h-string', 'h-number', 'h1']);
      for (const name of ['h-string', 'h-number']) {
        assert.match((rangesOf(answers.get(name)) as { reason: string }).reason, /no Host record names node/);
      }
      assert.deepEqual(rangesOf(answers.get('h1')), { kind: 'ranges', cidrs: ['10.1.0.0/24'] });
      const skipped = await registry.getSingleMetric('informer_skipped_objects_total')?.get();
      assert.deepEqual(
        skipped?.values.map((v) => [v.labels, v.value]),
        [[{ resource: 'hosts' }, 2]],
      );
    } finally {
      await source.stop();
    }
  });

  test('Hosts the controller may not list: lookups fail (retryable) after the wait, they do not hang', async () => {
    const source = new HostPodCidrSource({
      kubeConfig: api.kubeConfig({ name: 'no-rbac', groups: [] }),
      syncWaitMs: 200,
    });
    source.start();
    try {
      const answer = (await source.lookup(['h1'])).get('h1');
      assert.equal(answer?.ok, false);
      assert.equal((answer as { error: { kind?: string } }).error.kind, 'unavailable');
    } finally {
      await source.stop();
    }
  });

  test('before it is started, or once stopped, a lookup is a retryable failure, not an empty answer', async () => {
    const source = new HostPodCidrSource({ kubeConfig: api.kubeConfig() });
    const answer = (await source.lookup(['h1'])).get('h1');
    assert.equal(answer?.ok, false);
    assert.equal((answer as { error: { kind?: string } }).error.kind, 'unavailable');
  });
});
