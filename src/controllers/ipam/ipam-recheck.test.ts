/**
 * How IPAM looks again at nodes the cloud refuses (another cluster's instance, a stopped one): as the
 * NodeController does, after 5, 10, 20 and 40 minutes, then hourly, and from 5 minutes again once
 * the Node's providerID changes or the cloud's verdict on it does. The queue's delays run on a fake
 * clock; the API server is the simulator.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Registry } from 'prom-client';
import { ForbiddenError } from '../../errors.ts';
import { nodeInformer } from '../../kube/shared-informer.ts';
import { type KubeObject, type SimApiServer, startApiServer } from '../../sim/apiserver/index.ts';
import { countReaches } from '../../testing/count-reaches.ts';
import { FakeClock } from '../../testing/fake-clock.ts';
import { IpamController } from './ipam-controller.ts';
import type { PodCidrSource } from './sources.ts';

const minute = 60_000;
let api: SimApiServer;

before(async () => {
  api = await startApiServer();
});
after(() => api.close());

/** A cloud that refuses every instance with `verdict()`, recording each lookup and its fake time. */
function refusingSource(clock: FakeClock, verdict: () => string) {
  const asked: { key: string; at: number }[] = [];
  const source: PodCidrSource = {
    byNodeName: false,
    lookup: async (keys) => {
      for (const key of keys) asked.push({ key, at: clock.monotonic() / minute });
      return new Map(keys.map((key) => [key, { ok: false, error: new ForbiddenError(verdict()) }]));
    },
  };
  return { source, asked };
}

async function startIpam(source: PodCidrSource, clock: FakeClock) {
  const registry = new Registry();
  const nodes = nodeInformer(api.kubeConfig());
  const controller = new IpamController({ kubeConfig: api.kubeConfig(), nodes, source, registry, clock });
  const stop = new AbortController();
  const running = controller.start(stop.signal);
  const rejections = async () =>
    (await registry.getSingleMetric('ipam_controller_reconciles_total')?.get())?.values.find(
      (v) => v.labels['result'] === 'rejected',
    )?.value ?? 0;
  return {
    /** Waits (in real time) until `n` refusals have been counted. */
    rejected: (n: number) => countReaches(rejections, n, 'refusals'),
    async stop() {
      stop.abort();
      await running;
      await nodes.close();
    },
  };
}

function createNode(name: string, providerID: string): void {
  api.store.create({
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name },
    spec: { providerID },
  } as KubeObject);
}

/** Advances the clock through `delays` (minutes), checking the node is looked at after each and not before. */
async function expectChecksAfter(
  clock: FakeClock,
  ipam: Awaited<ReturnType<typeof startIpam>>,
  asked: unknown[],
  delays: number[],
): Promise<void> {
  for (const delay of delays) {
    const checks = asked.length;
    await clock.advance(delay * minute - 1);
    assert.equal(asked.length, checks, `not looked at again before ${delay} minutes`);
    await clock.advance(1);
    assert.equal(asked.length, checks + 1, `looked at again after ${delay} minutes`);
    await ipam.rejected(checks + 1);
  }
}

test('a refusal that persists is looked at after 5, 10, 20 and 40 minutes, then hourly', async () => {
  const clock = new FakeClock();
  const cloud = refusingSource(clock, () => 'instance i-0000000000000a001 is tagged for cluster other');
  createNode('i-0000000000000a001', 'aws:///us-test-1a/i-0000000000000a001');
  const ipam = await startIpam(cloud.source, clock);
  try {
    await ipam.rejected(1);
    await expectChecksAfter(clock, ipam, cloud.asked, [5, 10, 20, 40, 60, 60]);
  } finally {
    await ipam.stop();
    api.store.delete('nodes', undefined, 'i-0000000000000a001');
  }
});

test("a refused node whose providerID changes, or on which the cloud's verdict changes, is looked at again from 5 minutes", async () => {
  const clock = new FakeClock();
  let verdict = 'instance i-0000000000000b001 is tagged for cluster other';
  const cloud = refusingSource(clock, () => verdict);
  createNode('node-b', 'aws:///us-test-1a/i-0000000000000b001');
  const ipam = await startIpam(cloud.source, clock);
  try {
    await ipam.rejected(1);
    await expectChecksAfter(clock, ipam, cloud.asked, [5, 10, 20]);
    // The instance is stopped now: another verdict, so the next look is 5 minutes on, not 80.
    verdict = 'instance i-0000000000000b001 is stopped';
    await expectChecksAfter(clock, ipam, cloud.asked, [40, 5, 10]);
    // The Node names another instance: looked at now, then 5 minutes on.
    api.store.mutate('nodes', undefined, 'node-b', (node) => {
      node['spec'] = { providerID: 'aws:///us-test-1a/i-0000000000000b002' };
    });
    const checks = cloud.asked.length;
    await ipam.rejected(checks + 1);
    assert.equal(cloud.asked.at(-1)?.key, 'aws:///us-test-1a/i-0000000000000b002');
    await expectChecksAfter(clock, ipam, cloud.asked, [5, 10]);
  } finally {
    await ipam.stop();
    api.store.delete('nodes', undefined, 'node-b');
  }
});

test('a refused node given pod ranges by hand is looked at again at once, then from 5 minutes', async () => {
  const clock = new FakeClock();
  const cloud = refusingSource(clock, () => 'instance i-0000000000000c001 is tagged for cluster other');
  createNode('node-c', 'aws:///us-test-1a/i-0000000000000c001');
  const ipam = await startIpam(cloud.source, clock);
  try {
    await ipam.rejected(1);
    await expectChecksAfter(clock, ipam, cloud.asked, [5, 10, 20]);
    // Same instance, same verdict: only the edit says the refusal may no longer hold.
    api.store.mutate('nodes', undefined, 'node-c', (node) => {
      node['spec'] = {
        providerID: 'aws:///us-test-1a/i-0000000000000c001',
        podCIDR: '100.96.9.0/24',
        podCIDRs: ['100.96.9.0/24'],
      };
    });
    const checks = cloud.asked.length;
    await ipam.rejected(checks + 1);
    await expectChecksAfter(clock, ipam, cloud.asked, [5, 10]);
  } finally {
    await ipam.stop();
    api.store.delete('nodes', undefined, 'node-c');
  }
});
