/**
 * The `kops_*` gauges against an API server whose Nodes and pods are malformed, over real HTTP on
 * loopback (src/testing/hostile-apiserver.ts). What must hold: a Node or pod that cannot be read is
 * never counted as healthy, nor left out as if it did not exist: an unreadable Node counts as not
 * ready, an unreadable critical pod as of unknown phase.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Registry } from 'prom-client';
import type { CloudGroup } from '../cloud/types.ts';
import { nodeInformer } from '../kube/shared-informer.ts';
import type { InstanceGroup } from '../statestore/kops-types.ts';
import { answer, hostileApiServer, startStream } from '../testing/hostile-apiserver.ts';
import { capturedLogger } from '../testing/log-capture.ts';
import { ValidationMetrics } from './validation-metrics.ts';

const ready = { conditions: [{ type: 'Ready', status: 'True' }] };
const node = (name: string, patch: { labels?: unknown; status?: unknown; providerID?: unknown } = {}) => ({
  metadata: {
    name,
    uid: `uid-${name}`,
    resourceVersion: '1',
    labels: 'labels' in patch ? patch.labels : { 'kops.k8s.io/instancegroup': 'nodes' },
  },
  spec: { providerID: 'providerID' in patch ? patch.providerID : `aws:///z/${name}` },
  status: 'status' in patch ? patch.status : ready,
});
const criticalPod = (name: string, status: unknown) => ({
  metadata: { name, namespace: 'kube-system', resourceVersion: '1' },
  spec: { priorityClassName: 'system-node-critical', nodeName: 'n1' },
  status,
});

async function gauges(nodes: unknown[], pods: unknown[], members: string[]) {
  const api = await hostileApiServer((req, res) => {
    if (req.watch) return startStream(res);
    answer(res, 200, {
      metadata: { resourceVersion: '1' },
      items: req.path === '/api/v1/nodes' ? nodes : pods,
    });
  });
  const registry = new Registry();
  const { logger, lines } = capturedLogger();
  const informer = nodeInformer(api.kubeConfig, { registry, logger });
  const group: CloudGroup = {
    instanceGroup: 'nodes',
    cloudName: 'nodes',
    minSize: members.length,
    maxSize: members.length,
    targetSize: members.length,
    members: members.map((id) => ({
      instanceId: id,
      providerID: `aws:///z/${id}`,
      state: 'running',
      healthy: true,
    })),
  };
  const metrics = new ValidationMetrics({
    clusterName: 'c',
    kubeConfig: api.kubeConfig,
    nodes: informer,
    core: { listComponentStatus: async () => ({ items: [] }) },
    cloudGroups: { list: async () => [group] },
    instanceGroups: async () => [
      {
        apiVersion: 'kops.k8s.io/v1alpha2',
        kind: 'InstanceGroup',
        metadata: { name: 'nodes' },
        spec: { role: 'Node' },
      } as InstanceGroup,
    ],
    registry,
    logger,
  });
  const stop = new AbortController();
  const running = metrics.start(stop.signal);
  const value = async (name: string) =>
    new RegExp(`^${name}\\{cluster_name="c"\\} (\\d+)$`, 'm').exec(await registry.metrics())?.[1];
  try {
    for (let i = 0; i < 500 && (await value('kops_node_ready')) === undefined; i++) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    const read = async () => ({
      ready: await value('kops_node_ready'),
      notReady: await value('kops_node_notReady'),
      podUnknown: await value('kops_pod_unknown'),
      podNotReady: await value('kops_pod_notReady'),
      podPending: await value('kops_pod_pending'),
    });
    return { ...(await read()), lines };
  } finally {
    stop.abort();
    await running;
    await informer.close();
    await api.close();
  }
}

describe('kops_* gauges against a hostile API server', () => {
  test('a Node whose labels, conditions or providerID cannot be read counts as not ready, never as ready nor as absent', async () => {
    const nodes = [
      node('n1'),
      node('n2', { labels: 'not a map' }),
      node('n3', { labels: ['a', 'b'] }),
      node('n4', { status: { conditions: { type: 'Ready', status: 'True' } } }),
      node('n5', { status: { conditions: [null, { type: 'Ready', status: 'True' }] } }),
      node('n6', { status: 'Ready' }),
      node('n7', { labels: { 'kops.k8s.io/instancegroup': 'nodes', 'node-role.kubernetes.io/node': 5 } }),
      // Outside every cloud group: only its own object says it exists.
      node('x1', { status: { conditions: 'True' }, providerID: 'aws:///z/x1' }),
      // Annotations that are not a map say nothing about readiness: a Ready Node, counted as such.
      { ...node('x2'), metadata: { ...node('x2').metadata, annotations: 'kops.k8s.io/needs-update' } },
    ];
    const result = await gauges(nodes, [], ['n1', 'n2', 'n3', 'n4', 'n5', 'n6', 'n7']);
    assert.equal(result.ready, '2', 'only n1 and x2 are readable and Ready');
    assert.equal(result.notReady, '7', 'every other Node counts as not ready');
    assert.ok(!result.lines.some((l) => /informer handler failed/.test(l)), 'no handler failed on a Node');
  });

  test('a critical pod whose status cannot be read counts as of unknown phase, not as healthy', async () => {
    const pods = [
      criticalPod('p1', { phase: 'Running', containerStatuses: { ready: false, name: 'c' } }),
      criticalPod('p2', { phase: 7, containerStatuses: [{ ready: true, name: 'c' }] }),
      criticalPod('p3', 'Running'),
      criticalPod('p4', { phase: 'Running', containerStatuses: [null] }),
      criticalPod('ok', { phase: 'Running', containerStatuses: [{ ready: true, name: 'c' }] }),
    ];
    const result = await gauges([node('n1')], pods, ['n1']);
    assert.equal(result.podUnknown, '4');
    assert.equal(result.podNotReady, '0');
    assert.equal(result.podPending, '0');
  });
});
