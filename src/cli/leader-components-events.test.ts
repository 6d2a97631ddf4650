/**
 * The Events of the controllers buildLeaderComponents makes, over the simulated API server: their
 * names are keyed with the replicas' shared Secret (node-event.ts), through the production wiring
 * (one recorder for the NodeController and IPAM, its key from the NodeController's term). A broken
 * closure there would give every Event a random name again, and nothing else would notice.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Registry } from 'prom-client';
import { configSchema } from '../config/schema.ts';
import { labelsKeyField, labelsKeySecretName } from '../controllers/node/labels-key.ts';
import { eventName, eventNameKey } from '../controllers/node/node-event.ts';
import { csrInformer, nodeInformer } from '../kube/shared-informer.ts';
import { type KubeObject, type SimApiServer, startApiServer } from '../sim/apiserver/index.ts';
import { seedClusterStore } from '../statestore/cluster-store.ts';
import { loadSampleCluster } from '../statestore/fixtures.ts';
import { openVfs } from '../statestore/open.ts';
import { buildLeaderComponents } from './leader-components.ts';

let api: SimApiServer;
before(async () => {
  api = await startApiServer();
});
after(() => api.close());

test("a refused node's Event is named with the key of the replicas' shared Secret", async () => {
  const configBase = `memfs://leader-events-${process.pid}/cluster`;
  const vfs = openVfs(`memfs://leader-events-${process.pid}`);
  const sample = await loadSampleCluster('aws');
  await seedClusterStore(vfs, 'cluster', sample);
  // A metal inventory without the node: the NodeController refuses it (by name: metal nodes have no providerID).
  await vfs.write(
    'cluster/metal/inventory.yaml',
    'apiVersion: kops-controller.k8s.io/v1alpha1\nkind: MetalInventory\nhosts:\n  - name: other-host\n    instanceGroup: nodes\n    addresses: [10.0.9.9]\n',
  );
  api.store.create({
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name: 'not-in-the-inventory' },
  } as KubeObject);
  const kubeConfig = api.kubeConfig();
  const nodes = nodeInformer(kubeConfig);
  const built = await buildLeaderComponents({
    config: configSchema.parse({ clusterName: sample.name, cloud: 'metal', configBase }),
    kubeConfig,
    nodes,
    csrs: csrInformer(kubeConfig),
    vfsOptions: { env: {} },
    registry: new Registry(),
  });
  const controller = built.components.find((c) => c.name === 'node-controller');
  assert.ok(controller);
  const stop = new AbortController();
  const running = controller.start(stop.signal);
  try {
    const until = Date.now() + 20_000;
    let event: KubeObject | undefined;
    while (!event && Date.now() < until) {
      event = api.store.list('events', 'default')[0];
      if (!event) await new Promise((resolve) => setTimeout(resolve, 20));
    }
    assert.ok(event, 'an Event about the refused node');
    const secret = api.store.get('secrets', 'kube-system', labelsKeySecretName) as
      | (KubeObject & { data?: Record<string, string> })
      | undefined;
    const key = Buffer.from(secret?.data?.[labelsKeyField] ?? '', 'base64');
    assert.ok(key.length >= 32, 'the controller made the shared key');
    const node = api.store.get('nodes', undefined, 'not-in-the-inventory');
    const expected = eventName(
      { name: 'not-in-the-inventory', uid: String(node?.metadata.uid) },
      'Warning',
      String(event['reason']),
      String(event['message']),
      eventNameKey(key),
    );
    assert.equal(event.metadata.name, expected);
  } finally {
    stop.abort();
    await running;
    await nodes.close();
    built.close();
  }
});
