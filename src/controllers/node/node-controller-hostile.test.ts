/**
 * The NodeController against an API server whose Nodes are malformed, over real HTTP on loopback
 * (src/testing/hostile-apiserver.ts). What must hold: a Node whose fields do not have their types is
 * skipped with a logged reason (no cloud call with a providerID that is not a string, no patch), a
 * Node without a uid is never patched without the uid precondition, and label keys such as
 * `__proto__` and `constructor` are data, nothing more.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Registry } from 'prom-client';
import type { NodeIdentifier } from '../../cloud/types.ts';
import { nodeInformer } from '../../kube/shared-informer.ts';
import { ClusterStore, seedClusterStore } from '../../statestore/cluster-store.ts';
import { loadSampleCluster } from '../../statestore/fixtures.ts';
import { openVfs } from '../../statestore/open.ts';
import { answer, eventually, hostileApiServer, startStream } from '../../testing/hostile-apiserver.ts';
import { capturedLogger } from '../../testing/log-capture.ts';
import { NodeController } from './node-controller.ts';

const sample = await loadSampleCluster('aws');
const root = openVfs(`memfs://node-controller-hostile-${process.pid}`);
await seedClusterStore(root, sample.name, sample);

/** A Node as sent: any field may be spoilt. */
interface WireNode {
  metadata: Record<string, unknown>;
  spec: Record<string, unknown>;
}

/** A well-formed Node of instance group `nodes-us-test-1a`. */
function node(name: string): WireNode {
  return {
    metadata: {
      name,
      uid: `uid-${name}`,
      resourceVersion: '1',
      labels: { 'kubernetes.io/hostname': name },
      annotations: {},
    },
    spec: { providerID: `aws:///us-test-1a/${name}` },
  };
}

describe('NodeController against a hostile API server', () => {
  test('a Node whose fields have the wrong JSON types is skipped with a logged reason: no cloud call, no patch', async () => {
    const malformed: [string, (n: WireNode) => void][] = [
      ['i-labels-string', (n) => (n.metadata['labels'] = 'kops.k8s.io/instancegroup=nodes')],
      ['i-labels-array', (n) => (n.metadata['labels'] = ['node-role.kubernetes.io/node'])],
      ['i-label-value', (n) => (n.metadata['labels'] = { 'node-role.kubernetes.io/master': { a: 1 } })],
      ['i-providerid-number', (n) => (n.spec['providerID'] = 42)],
      ['i-providerid-object', (n) => (n.spec['providerID'] = { id: 'aws:///us-test-1a/i-x' })],
      ['i-annotations-string', (n) => (n.metadata['annotations'] = 'kops.k8s.io/managed-labels')],
      ['i-managed-number', (n) => (n.metadata['annotations'] = { 'kops.k8s.io/managed-labels': 5 })],
      [
        'i-signature-object',
        (n) => (n.metadata['annotations'] = { 'kops.k8s.io/managed-labels-signature': {} }),
      ],
      ['i-uid-missing', (n) => delete n.metadata['uid']],
      ['i-uid-number', (n) => (n.metadata['uid'] = 12)],
    ];
    const nodes = malformed.map(([name, spoil]) => {
      const n = node(name);
      spoil(n);
      return n;
    });
    // Label keys named like Object.prototype's members, with string values: plain labels.
    const proto = node('i-proto');
    proto.metadata['labels'] = JSON.parse(
      '{"__proto__": "x", "constructor": "y", "toString": "z", "kubernetes.io/hostname": "i-proto"}',
    );
    // A name no API server accepts (a Node's is a DNS subdomain, 253 characters at most), 2 MB long.
    const huge = node('i-huge');
    huge.metadata['name'] = `i-${'n'.repeat(2_000_000)}`;
    nodes.push(node('i-good'), proto, huge);

    const patches = new Map<string, { metadata: { uid?: unknown; labels: Record<string, string> } }>();
    const key = Buffer.alloc(32, 7).toString('base64');
    const api = await hostileApiServer((req, res) => {
      if (req.path === '/api/v1/nodes') {
        if (req.watch) return startStream(res);
        return answer(res, 200, { kind: 'NodeList', metadata: { resourceVersion: '1' }, items: nodes });
      }
      if (req.path.endsWith('/secrets/kops-controller-labels-key')) {
        return answer(res, 200, {
          metadata: { name: 'kops-controller-labels-key', resourceVersion: '3' },
          data: { key },
        });
      }
      if (req.method === 'PATCH') {
        const name = decodeURIComponent(req.path.slice('/api/v1/nodes/'.length));
        patches.set(name, JSON.parse(req.body));
        return answer(res, 200, nodes.find((n) => n.metadata['name'] === name) ?? {});
      }
      if (req.method === 'POST') return answer(res, 201, JSON.parse(req.body));
      answer(res, 404, { kind: 'Status', code: 404 });
    });
    const asked: unknown[] = [];
    const identifier: NodeIdentifier = {
      identify: async (ids) => {
        asked.push(...ids);
        return new Map(
          ids.map((id) => [
            id,
            {
              ok: true,
              identity: {
                providerID: id,
                instanceId: String(id).split('/').pop() ?? '',
                instanceGroup: 'nodes-us-test-1a',
                state: 'running',
                addresses: [],
              },
            },
          ]),
        );
      },
    };
    const { logger, lines } = capturedLogger();
    const informer = nodeInformer(api.kubeConfig, { logger });
    const controller = new NodeController({
      kubeConfig: api.kubeConfig,
      nodes: informer,
      identifier,
      clusterStore: new ClusterStore(openVfs(`${root.url}/${sample.name}`), { pollIntervalMs: 60_000 }),
      registry: new Registry(),
      logger,
    });
    const stop = new AbortController();
    const running = controller.start(stop.signal);
    try {
      await eventually(
        () => patches.has('i-good') && patches.has('i-proto'),
        'the well-formed Nodes labelled',
      );
      await new Promise((resolve) => setTimeout(resolve, 300));
    } finally {
      stop.abort();
      await running;
      await informer.close();
      await api.close();
    }
    assert.deepEqual(
      [...patches.keys()].sort(),
      ['i-good', 'i-proto'],
      'only the well-formed Nodes were patched',
    );
    const longest = Math.max(...lines.map((l) => l.length));
    assert.ok(longest < 10_000, `a log line of ${longest} bytes`);
    assert.ok(
      lines.some((l) => /"object":"i-nnnn.*…"/.test(l) && /cannot transform object; skipped/.test(l)),
    );
    assert.ok(
      asked.every((id) => typeof id === 'string'),
      `the cloud was asked about ${JSON.stringify(asked)}`,
    );
    for (const [name] of malformed) {
      assert.ok(
        lines.some((l) => l.includes(`"object":"${name}"`) && /cannot transform object; skipped/.test(l)),
        `${name} is skipped with a logged reason`,
      );
    }
    for (const patch of patches.values()) {
      assert.equal(typeof patch.metadata.uid, 'string', 'every patch names the uid it was planned for');
    }
    const protoPatch = patches.get('i-proto')?.metadata;
    assert.ok(protoPatch);
    assert.equal(protoPatch.labels['kops.k8s.io/instancegroup'], 'nodes-us-test-1a');
    for (const label of ['__proto__', 'constructor', 'toString']) {
      assert.ok(!Object.hasOwn(protoPatch.labels, label), `${label} is left as it is`);
    }
    assert.equal(Object.getPrototypeOf(protoPatch.labels), Object.prototype);
  });
});
