/**
 * How the NodeController looks again at nodes the cloud refused, at fleet scale: a refusal that
 * persists is checked after 5, 10, 20, 40 minutes, then hourly, and from 5 minutes again once its
 * Node changes; re-checks that come due together are looked up together (one bulk lookup the
 * identifier batches), not 16 at a time as workers free up. The queue's delays run on a fake clock;
 * the API server is a loopback stub (src/testing/hostile-apiserver.ts).
 */
import assert from 'node:assert/strict';
import type { ServerResponse } from 'node:http';
import { describe, test } from 'node:test';
import { Registry } from 'prom-client';
import type { IdentifyResult, NodeIdentifier } from '../../cloud/types.ts';
import { ForbiddenError } from '../../errors.ts';
import { nodeInformer } from '../../kube/shared-informer.ts';
import { ClusterStore, seedClusterStore } from '../../statestore/cluster-store.ts';
import { loadSampleCluster } from '../../statestore/fixtures.ts';
import { openVfs } from '../../statestore/open.ts';
import { countReaches } from '../../testing/count-reaches.ts';
import { FakeClock } from '../../testing/fake-clock.ts';
import {
  answer,
  type HostileApiServer,
  hostileApiServer,
  startStream,
  watchLine,
} from '../../testing/hostile-apiserver.ts';
import { NodeController, recheckDelayMs } from './node-controller.ts';

const sample = await loadSampleCluster('aws');
const root = openVfs(`memfs://node-controller-recheck-${process.pid}`);
await seedClusterStore(root, sample.name, sample);

const minute = 60_000;

function node(name: string, labels: Record<string, string> = {}, resourceVersion = '1') {
  return {
    metadata: {
      name,
      uid: `uid-${name}`,
      resourceVersion,
      labels: { 'kubernetes.io/hostname': name, ...labels },
    },
    spec: { providerID: `aws:///us-test-1a/${name}` },
  };
}

/** The cloud's verdict: another cluster's instance. */
function refused(id: string): IdentifyResult {
  return {
    ok: false,
    error: new ForbiddenError(`instance ${id.split('/').pop()} is tagged for cluster other`),
  };
}

/** Every lookup asked for, with the fake time it was asked at; answers wait while `hold` is set. */
function refusingIdentifier(clock: FakeClock) {
  const asked: { id: string; at: number }[] = [];
  let held: (() => void)[] | undefined;
  const identifier: NodeIdentifier = {
    identify: async (ids) => {
      for (const id of ids) asked.push({ id, at: clock.monotonic() });
      if (held) await new Promise<void>((resolve) => held?.push(resolve));
      return new Map(ids.map((id) => [id, refused(id)]));
    },
  };
  return {
    identifier,
    asked,
    hold: () => (held = []),
    release: () => {
      const waiting = held ?? [];
      held = undefined;
      for (const resolve of waiting) resolve();
    },
  };
}

/** An API server listing `nodes`, keeping the watch open for the test to write to, and taking Events. */
async function apiServer(nodes: ReturnType<typeof node>[]) {
  let watch: ServerResponse | undefined;
  const key = Buffer.alloc(32, 7).toString('base64');
  const api: HostileApiServer = await hostileApiServer((req, res) => {
    if (req.path === '/api/v1/nodes') {
      if (!req.watch) {
        return answer(res, 200, { kind: 'NodeList', metadata: { resourceVersion: '1' }, items: nodes });
      }
      watch = res;
      return startStream(res);
    }
    if (req.path.endsWith('/secrets/kops-controller-labels-key')) {
      return answer(res, 200, {
        metadata: { name: 'kops-controller-labels-key', resourceVersion: '3' },
        data: { key },
      });
    }
    if (req.method === 'POST') return answer(res, 201, JSON.parse(req.body));
    answer(res, 404, { kind: 'Status', code: 404 });
  });
  return {
    api,
    events: () => api.requests.filter((r) => r.method === 'POST' && r.path.endsWith('/events')).length,
    modify: (object: ReturnType<typeof node>) => watch?.write(watchLine('MODIFIED', object)),
  };
}

async function startController(api: HostileApiServer, identifier: NodeIdentifier, clock: FakeClock) {
  const registry = new Registry();
  const informer = nodeInformer(api.kubeConfig);
  const controller = new NodeController({
    kubeConfig: api.kubeConfig,
    nodes: informer,
    identifier,
    clusterStore: new ClusterStore(openVfs(`${root.url}/${sample.name}`), { pollIntervalMs: 60_000 }),
    registry,
    clock,
  });
  const stop = new AbortController();
  const running = controller.start(stop.signal);
  const rejections = async () =>
    Number(
      /result="rejected"\} (\d+)/.exec(
        await registry.getSingleMetricAsString('node_controller_reconciles_total'),
      )?.[1] ?? 0,
    );
  return {
    rejections,
    /** Waits (in real time) until `n` refusals have been counted. */
    rejected: (n: number) => countReaches(rejections, n, 'refusals'),
    async stop() {
      stop.abort();
      await running;
      await informer.close();
      await api.close();
    },
  };
}

describe('NodeController re-checks of refused nodes', () => {
  test('the delay doubles from the first to the longest', () => {
    assert.deepEqual(
      [1, 2, 3, 4, 5, 6, 20].map((n) => recheckDelayMs(n, 5 * minute, 60 * minute) / minute),
      [5, 10, 20, 40, 60, 60, 60],
    );
  });

  test('a refusal that persists is checked after 5, 10, 20 and 40 minutes, then hourly; a change of its Node starts again from 5', async () => {
    const clock = new FakeClock();
    const cloud = refusingIdentifier(clock);
    const server = await apiServer([node('i-refused')]);
    const controller = await startController(server.api, cloud.identifier, clock);
    try {
      await controller.rejected(1);
      let checks = 1;
      for (const delay of [5, 10, 20, 40, 60, 60]) {
        await clock.advance(delay * minute - 1);
        assert.equal(cloud.asked.length, checks, `not checked again before ${delay} minutes`);
        await clock.advance(1);
        checks++;
        assert.equal(cloud.asked.length, checks, `checked again after ${delay} minutes`);
        await controller.rejected(checks);
      }
      assert.equal(server.events(), 1, 'one Event for the refusal, however often it is checked');
      // Someone relabels the Node (or it gets another providerID): looked at now, then after 5 minutes.
      server.modify(node('i-refused', { team: 'a' }, '2'));
      await controller.rejected(++checks);
      assert.equal(cloud.asked.length, checks);
      await clock.advance(5 * minute);
      assert.equal(cloud.asked.length, checks + 1, 'the backoff started again from 5 minutes');
      await controller.rejected(checks + 1);
    } finally {
      await controller.stop();
    }
  });

  test('re-checks that come due together are all looked up at once, not as 16 workers free up', async () => {
    const clock = new FakeClock();
    const cloud = refusingIdentifier(clock);
    const names = Array.from({ length: 100 }, (_, i) => `i-refused-${i}`);
    const server = await apiServer(names.map((name) => node(name)));
    const controller = await startController(server.api, cloud.identifier, clock);
    try {
      await controller.rejected(names.length);
      assert.equal(cloud.asked.length, names.length);
      // The cloud is slow to answer the re-checks: every worker waits on a lookup.
      cloud.hold();
      await clock.advance(5 * minute);
      const rechecked = cloud.asked.filter((a) => a.at === 5 * minute).map((a) => a.id);
      assert.equal(rechecked.length, names.length, 'every due node was asked for as it came due');
      cloud.release();
      await controller.rejected(2 * names.length);
      assert.equal(cloud.asked.length, 2 * names.length, 'each once');
    } finally {
      cloud.release();
      await controller.stop();
    }
  });
});
