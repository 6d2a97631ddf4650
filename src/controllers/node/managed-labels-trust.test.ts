/**
 * The NodeController prunes only on the strength of data a node cannot write. The managed-labels
 * annotation lives on the Node, which its kubelet may change (NodeRestriction restricts a kubelet's
 * labels, not its annotations); these tests play the compromised kubelet against a real controller
 * on the simulated cluster.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Registry } from 'prom-client';
import { nodeInformer } from '../../kube/shared-informer.ts';
import { managedLabelsAnnotation } from '../../nodelabels/diff-labels.ts';
import {
  managedLabelsSignatureAnnotation,
  type TrustedManagedLabels,
  verifyManagedLabels,
} from '../../nodelabels/signed-managed-labels.ts';
import type { KubeObject } from '../../sim/apiserver/index.ts';
import type { SimInstanceInput } from '../../sim/aws/world.ts';
import { eventually, startAwsDevCluster } from '../../testing/aws-dev-cluster.ts';
import { labelsKeyField, labelsKeySecretName } from './labels-key.ts';
import { NodeController } from './node-controller.ts';

const aws = await startAwsDevCluster('managed-labels-trust-');
const { cluster, store, provider, clusterStore, labelsOf, annotationsOf, editNodeLabels } = aws;

/** The API requests the controller makes that these tests count: key Secret creates, Node patches. */
const counted = { secretCreates: 0, nodePatches: 0 };
const faults = cluster.api.server.faults;
const plan = faults.plan.bind(faults);
faults.plan = (resource, verb, namespace) => {
  if (resource === 'secrets' && verb === 'create') counted.secretCreates++;
  if (resource === 'nodes' && verb === 'patch') counted.nodePatches++;
  return plan(resource, verb, namespace);
};

after(() => aws.close());

const protectedLabel = 'node-restriction.kubernetes.io/dedicated';
let nextInstance = 77_000;

function newInstance(): SimInstanceInput {
  return aws.addNodesInstance(nextInstance++);
}

function nodeOf(instance: SimInstanceInput, annotations: Record<string, string> = {}): KubeObject {
  return aws.nodeOf(instance, { annotations });
}

const settle = () => new Promise((resolve) => setTimeout(resolve, 1_000));

/** What a kubelet may do to its own Node: change its annotations (as the API server's patch would). */
function kubeletAnnotates(name: string, annotations: Record<string, string>): void {
  store.mutate('nodes', undefined, name, (object) => {
    object.metadata.annotations = { ...(object.metadata.annotations ?? {}), ...annotations };
  });
}

/** What only an admin may do: a NodeRestriction-protected label. */
function adminLabels(name: string, labels: Record<string, string>): void {
  store.mutate('nodes', undefined, name, (object) => {
    object.metadata.labels = { ...object.metadata.labels, ...labels };
  });
}

function controller(registry = new Registry()): NodeController {
  return new NodeController({
    kubeConfig: cluster.api.server.kubeConfig(),
    nodes: nodeInformer(cluster.api.server.kubeConfig()),
    identifier: provider.nodeIdentifier,
    clusterStore,
    registry,
    rejectionRetryMs: 3_600_000,
    labelsKeyBackoff: { initialMs: 100, maxMs: 200 },
  });
}

/** The key in the controller's Secret (kube-system/kops-controller-labels-key). */
function signingKey(): Buffer {
  const secret = store.get('secrets', 'kube-system', labelsKeySecretName);
  const data = (secret?.['data'] ?? {}) as Record<string, string>;
  return Buffer.from(data[labelsKeyField] ?? '', 'base64');
}

/** How the controller's key judges a node's managed-labels annotation now. */
function trustOf(name: string): TrustedManagedLabels {
  const node = store.get('nodes', undefined, name);
  const annotations = annotationsOf(name);
  return verifyManagedLabels(
    signingKey(),
    { name, uid: String(node?.metadata.uid) },
    annotations[managedLabelsAnnotation],
    annotations[managedLabelsSignatureAnnotation],
  );
}

/** Whether the node's annotation is signed and lists exactly `keys`. */
function signedFor(name: string, keys: string[]): boolean {
  const { trust, keys: managed } = trustOf(name);
  return trust === 'verified' && managed.join(',') === [...keys].sort().join(',');
}

async function metric(registry: Registry, name: string, labels = ''): Promise<number> {
  const text = await registry.getSingleMetricAsString(name);
  const escaped = labels.replace(/[{}"]/g, (c) => `\\${c}`);
  return Number(new RegExp(`^${name}${escaped} (\\S+)$`, 'm').exec(text)?.[1] ?? 0);
}

const group = 'nodes-us-test-1a';
/** The keys the group's nodes get: the cluster's kubelet nodeLabels, the role and group labels. */
const groupKeys = ['example.com/fleet', 'kops.k8s.io/instancegroup', 'node-role.kubernetes.io/node'];
const isLabelled = (name: string) => labelsOf(name)['kops.k8s.io/instancegroup'] === group;

describe('the managed-labels annotation is trusted only with the controller’s signature', () => {
  const registry = new Registry();
  const stop = new AbortController();
  let running: Promise<void> | undefined;
  before(() => {
    running = controller(registry).start(stop.signal);
  });
  after(async () => {
    stop.abort();
    await running;
  });

  test('a key a node forges into its managed set is not pruned (an admin’s NodeRestriction label stays)', async () => {
    const instance = newInstance();
    store.create(nodeOf(instance));
    await eventually(
      'labelled and signed',
      () => isLabelled(instance.id) && signedFor(instance.id, groupKeys),
    );
    adminLabels(instance.id, { [protectedLabel]: 'secure' });
    await settle();
    assert.equal(
      labelsOf(instance.id)[protectedLabel],
      'secure',
      'the admin label is kept before the forgery',
    );
    const forged = `${annotationsOf(instance.id)[managedLabelsAnnotation]},${protectedLabel}`;
    kubeletAnnotates(instance.id, { [managedLabelsAnnotation]: forged });
    await eventually('the forged set is replaced by a signed one', () => signedFor(instance.id, groupKeys));
    await settle();
    assert.equal(labelsOf(instance.id)[protectedLabel], 'secure', 'pruned on the node’s say-so');
    assert.ok(
      (await metric(registry, 'node_controller_managed_labels_untrusted_total', '{reason="invalid"}')) >= 1,
    );
  });

  test('an annotation copied from another node, signature and all, is not trusted', async () => {
    // A high-memory node's signed set lists example.com/workload and example.com/storage.
    const [donor] = cluster.nodesByGroup.get('high-memory-us-test-1b') as [string];
    await eventually(`${donor} is labelled and signed`, () =>
      trustOf(donor).keys.includes('example.com/storage'),
    );
    const instance = newInstance();
    store.create(nodeOf(instance));
    await eventually(
      'labelled and signed',
      () => isLabelled(instance.id) && signedFor(instance.id, groupKeys),
    );
    adminLabels(instance.id, { 'example.com/storage': 'pinned-by-admin', [protectedLabel]: 'secure' });
    const copied = annotationsOf(donor);
    kubeletAnnotates(instance.id, {
      [managedLabelsAnnotation]: copied[managedLabelsAnnotation] as string,
      [managedLabelsSignatureAnnotation]: copied[managedLabelsSignatureAnnotation] as string,
    });
    await eventually('the copied set is replaced by its own signed one', () =>
      signedFor(instance.id, groupKeys),
    );
    await settle();
    assert.equal(labelsOf(instance.id)['example.com/storage'], 'pinned-by-admin');
    assert.equal(labelsOf(instance.id)[protectedLabel], 'secure');
  });

  test('an unsigned (pre-signature) annotation prunes nothing and is signed again with one patch', async () => {
    const instance = newInstance();
    const patchesBefore = counted.nodePatches;
    const legacy = nodeOf(instance, {
      [managedLabelsAnnotation]: `kops.k8s.io/instancegroup,${protectedLabel}`,
    });
    // Labelled by a controller that did not sign yet: the group's labels, and an admin's.
    legacy.metadata.labels = {
      ...legacy.metadata.labels,
      'example.com/fleet': 'general',
      'kops.k8s.io/instancegroup': group,
      'node-role.kubernetes.io/node': '',
      [protectedLabel]: 'secure',
    };
    store.create(legacy);
    await eventually('labelled and signed', () => signedFor(instance.id, groupKeys));
    const version = store.get('nodes', undefined, instance.id)?.metadata.resourceVersion;
    await settle();
    assert.equal(labelsOf(instance.id)[protectedLabel], 'secure', 'pruned from an unsigned annotation');
    assert.equal(
      store.get('nodes', undefined, instance.id)?.metadata.resourceVersion,
      version,
      'patched again',
    );
    assert.equal(counted.nodePatches - patchesBefore, 1, 'one patch: the annotation signed again');
    assert.ok(
      (await metric(registry, 'node_controller_managed_labels_untrusted_total', '{reason="unsigned"}')) >= 1,
    );
  });

  test('a label removed from the instance group is still pruned, and the new set signed', async () => {
    const instance = newInstance();
    store.create(nodeOf(instance));
    await eventually('labelled', () => isLabelled(instance.id));
    await editNodeLabels(group, (labels) => {
      labels['example.com/tier'] = 'gold';
    });
    await eventually(
      'the new label is set and signed',
      () =>
        labelsOf(instance.id)['example.com/tier'] === 'gold' &&
        signedFor(instance.id, [...groupKeys, 'example.com/tier']),
    );
    await editNodeLabels(group, (labels) => {
      delete labels['example.com/tier'];
    });
    await eventually(
      'the removed label is pruned and the set signed without it',
      () => !('example.com/tier' in labelsOf(instance.id)) && signedFor(instance.id, groupKeys),
    );
  });
});

describe('the signing key across leadership terms', () => {
  test('the key Secret is created once; a later term (or replica) reads it and trusts what the first signed', async () => {
    assert.equal(counted.secretCreates, 1, 'the first term created the Secret');
    const secret = store.get('secrets', 'kube-system', labelsKeySecretName);
    assert.equal(secret?.['immutable'], true);
    assert.equal(signingKey().length, 32);
    const uid = secret?.metadata.uid;
    const names = store
      .list('nodes')
      .map((node) => node.metadata.name as string)
      .filter(isLabelled);
    assert.ok(names.length > 3 && names.every((name) => trustOf(name).trust === 'verified'));
    const same = controller();
    for (const term of [same, same, controller()]) {
      const patches = counted.nodePatches;
      const leading = new AbortController();
      const run = term.start(leading.signal);
      try {
        const instance = newInstance();
        store.create(nodeOf(instance));
        await eventually('a new node is labelled and signed', () => signedFor(instance.id, groupKeys));
        await settle();
      } finally {
        leading.abort();
        await run;
      }
      assert.equal(
        counted.nodePatches - patches,
        1,
        'only the new node was patched: every signed set was trusted',
      );
    }
    assert.equal(counted.secretCreates, 1, 'no term created it again');
    assert.equal(store.get('secrets', 'kube-system', labelsKeySecretName)?.metadata.uid, uid);
  });
});

describe('when the key Secret cannot be read', () => {
  test('labels are still added, nothing is pruned from node data; once the key is back, all is signed and pruned', async () => {
    const registry = new Registry();
    faults.errors({ resource: 'secrets', verbs: ['get'], rate: 1 });
    const leading = new AbortController();
    const run = controller(registry).start(leading.signal);
    try {
      await eventually(
        'the key is reported unavailable',
        async () => (await metric(registry, 'node_controller_labels_key_unavailable')) === 1,
      );
      const instance = newInstance();
      store.create(nodeOf(instance));
      await eventually('a new node is labelled without the key', () => isLabelled(instance.id));
      assert.equal(annotationsOf(instance.id)[managedLabelsSignatureAnnotation], undefined, 'nothing signed');
      await editNodeLabels(group, (labels) => {
        labels['example.com/outage'] = 'yes';
      });
      await eventually(
        'a label the group adds is set',
        () => labelsOf(instance.id)['example.com/outage'] === 'yes',
      );
      await editNodeLabels(group, (labels) => {
        delete labels['example.com/outage'];
      });
      // A forged set would be ignored just the same: without the key nothing read from the node prunes.
      const [older] = store
        .list('nodes')
        .map((node) => node.metadata.name as string)
        .filter((name) => name !== instance.id && isLabelled(name));
      await settle();
      assert.equal(labelsOf(instance.id)['example.com/outage'], 'yes', 'not pruned without the key');
      assert.equal(labelsOf(older as string)['example.com/outage'], 'yes');
      faults.reset();
      await eventually(
        'the key is read again',
        async () => (await metric(registry, 'node_controller_labels_key_unavailable')) === 0,
      );
      for (const name of [instance.id, older as string]) {
        await eventually(
          `${name}: the label set without the key is pruned, and the set signed`,
          () => !('example.com/outage' in labelsOf(name)) && signedFor(name, groupKeys),
        );
      }
    } finally {
      faults.reset();
      leading.abort();
      await run;
    }
    assert.equal(
      await metric(registry, 'node_controller_labels_key_unavailable'),
      0,
      'reset when the term ends',
    );
  });
});
