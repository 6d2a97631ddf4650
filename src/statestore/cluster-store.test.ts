import assert from 'node:assert/strict';
import { once } from 'node:events';
import { after, describe, test } from 'node:test';
import { OAuth2Client } from 'google-auth-library';
import { Registry } from 'prom-client';
import { InvalidInputError, NotFoundError } from '../errors.ts';
import { startGcsSim } from '../sim/gcs/server.ts';
import { startS3Sim } from '../sim/s3/server.ts';
import { ClusterStore, type StoreReadError, seedClusterStore, staleObjectsMetric } from './cluster-store.ts';
import { loadSampleCluster } from './fixtures.ts';
import { clearMemfs } from './memfs-vfs.ts';
import { openVfs } from './open.ts';
import type { Vfs } from './types.ts';

const aws = await loadSampleCluster('aws');
const nodesYaml = aws.instanceGroups.find((t) => t.includes('name: nodes-us-test-1a'))!;

let storeCounter = 0;
/** A fresh memfs state store seeded with the sample AWS cluster, and a VFS at its configBase. */
async function seededMemfs(): Promise<{ root: Vfs; base: Vfs }> {
  const authority = `cluster-store-${++storeCounter}`;
  clearMemfs(authority);
  const root = openVfs(`memfs://${authority}`);
  await seedClusterStore(root, aws.name, aws);
  return { root, base: openVfs(`memfs://${authority}/${aws.name}`) };
}

/** Wraps a VFS to count reads and stats. */
function counting(vfs: Vfs): Vfs & { reads: number; stats: number } {
  const counted = {
    url: vfs.url,
    reads: 0,
    stats: 0,
    read: (p: string) => {
      counted.reads++;
      return vfs.read(p);
    },
    stat: (p: string) => {
      counted.stats++;
      return vfs.stat(p);
    },
    write: vfs.write.bind(vfs),
    list: vfs.list.bind(vfs),
    delete: vfs.delete.bind(vfs),
  };
  return counted;
}

function readErrors(store: ClusterStore): StoreReadError[] {
  const errors: StoreReadError[] = [];
  store.on('readError', (e) => errors.push(e));
  return errors;
}

describe('ClusterStore', () => {
  test('reads the completed cluster spec and instance groups from the kops layout', async () => {
    const { base } = await seededMemfs();
    const store = new ClusterStore(base);
    assert.equal((await store.cluster()).metadata.name, 'minimal.example.com');
    const cp = await store.instanceGroup('control-plane-us-test-1a');
    assert.equal(cp.spec.role, 'ControlPlane');
    assert.deepEqual(
      (await store.instanceGroups()).map((g) => g.metadata.name),
      ['control-plane-us-test-1a', 'high-memory-us-test-1b', 'nodes-us-test-1a'],
    );
  });

  test('falls back to `config` when there is no cluster-completed.spec', async () => {
    const { base } = await seededMemfs();
    await base.delete('cluster-completed.spec');
    assert.equal((await new ClusterStore(base).cluster()).spec.cloudProvider, 'aws');
  });

  test('a missing cluster or instance group is a NotFoundError that says where it looked', async () => {
    const empty = openVfs(`memfs://cluster-store-empty-${++storeCounter}/nothing.example.com`);
    await assert.rejects(
      new ClusterStore(empty).cluster(),
      (err: unknown) =>
        err instanceof NotFoundError &&
        /neither cluster-completed\.spec nor config exists; check configBase/.test(err.message),
    );
    const { base } = await seededMemfs();
    await assert.rejects(
      new ClusterStore(base).instanceGroup('ghosts'),
      (err: unknown) =>
        err instanceof NotFoundError && /instance group "ghosts" does not exist/.test(err.message),
    );
    await assert.rejects(new ClusterStore(base).instanceGroup('../config'), InvalidInputError);
  });

  test('a corrupt object on first read is an InvalidInputError naming the file', async () => {
    const { base } = await seededMemfs();
    await base.write(
      'instancegroup/broken',
      'apiVersion: kops.k8s.io/v1alpha2\nkind: InstanceGroup\nmetadata:\n  name: broken\nspec:\n  role: Wizard\n',
    );
    await assert.rejects(
      new ClusterStore(base).instanceGroup('broken'),
      (err: unknown) =>
        err instanceof InvalidInputError &&
        /instancegroup\/broken: spec\.role: unknown role "Wizard"/.test(err.message),
    );
  });

  test('an instance group file must hold the group it is named after', async () => {
    const { base } = await seededMemfs();
    await base.write('instancegroup/impostor', nodesYaml);
    await assert.rejects(
      new ClusterStore(base).instanceGroup('impostor'),
      (err: unknown) =>
        err instanceof InvalidInputError &&
        /instancegroup\/impostor: metadata\.name is "nodes-us-test-1a", but the file is for instance group "impostor"/.test(
          err.message,
        ),
    );
  });

  test('refresh picks up an edited instance group and emits the new object', async () => {
    const { base } = await seededMemfs();
    const store = new ClusterStore(base);
    await store.instanceGroup('nodes-us-test-1a');
    const changed = once(store, 'instanceGroup');
    await base.write(
      'instancegroup/nodes-us-test-1a',
      nodesYaml.replace('nodeLabels:\n', 'nodeLabels:\n    example.com/new: "yes"\n'),
    );
    await store.refresh();
    const [ig] = await changed;
    assert.equal(ig.spec.nodeLabels?.['example.com/new'], 'yes');
    assert.equal((await store.instanceGroup('nodes-us-test-1a')).spec.nodeLabels?.['example.com/new'], 'yes');
  });

  test('refresh emits a changed cluster', async () => {
    const { base } = await seededMemfs();
    const store = new ClusterStore(base);
    await store.cluster();
    const changed = once(store, 'cluster');
    await base.write('cluster-completed.spec', aws.cluster.replace('v1.33.0', 'v1.34.1'));
    await store.refresh();
    const [cluster] = await changed;
    assert.equal(cluster.spec.kubernetesVersion, 'v1.34.1');
  });

  test('an unchanged store costs one stat per cached object and no reads', async () => {
    const { base } = await seededMemfs();
    const vfs = counting(base);
    const store = new ClusterStore(vfs);
    await store.cluster();
    await store.instanceGroup('nodes-us-test-1a');
    const readsBefore = vfs.reads;
    vfs.stats = 0;
    await store.refresh();
    await store.refresh();
    assert.equal(vfs.reads, readsBefore);
    assert.equal(vfs.stats, 4);
  });

  test('concurrent first reads of one object share a single read', async () => {
    const { base } = await seededMemfs();
    const vfs = counting(base);
    const store = new ClusterStore(vfs);
    await Promise.all(Array.from({ length: 20 }, () => store.instanceGroup('nodes-us-test-1a')));
    assert.equal(vfs.reads, 1);
  });

  test('a corrupt edit keeps the last good object and reports the error until it is fixed', async () => {
    const { base } = await seededMemfs();
    const store = new ClusterStore(base);
    const good = await store.instanceGroup('nodes-us-test-1a');
    const errors = readErrors(store);
    let changes = 0;
    store.on('instanceGroup', () => changes++);

    await base.write('instancegroup/nodes-us-test-1a', nodesYaml.replace('role: Node', 'role: [Node'));
    await store.refresh();
    assert.equal(changes, 0);
    assert.equal(await store.instanceGroup('nodes-us-test-1a'), good, 'the last good object is still served');
    assert.equal(errors.length, 1);
    assert.equal(errors[0]?.path, 'instancegroup/nodes-us-test-1a');
    assert.ok(errors[0]?.error instanceof InvalidInputError);
    assert.ok(store.lastError({ instanceGroup: 'nodes-us-test-1a' }) instanceof InvalidInputError);

    await base.write('instancegroup/nodes-us-test-1a', nodesYaml.replace('maxSize: 3', 'maxSize: 4'));
    await store.refresh();
    assert.equal(changes, 1);
    assert.equal((await store.instanceGroup('nodes-us-test-1a')).spec.maxSize, 4);
    assert.equal(store.lastError({ instanceGroup: 'nodes-us-test-1a' }), undefined);
  });

  test('a deleted object keeps the last good one and reports NotFound', async () => {
    const { base } = await seededMemfs();
    const store = new ClusterStore(base);
    await store.cluster();
    const good = await store.instanceGroup('nodes-us-test-1a');
    const errors = readErrors(store);
    await base.delete('instancegroup/nodes-us-test-1a');
    await base.delete('cluster-completed.spec');
    await base.delete('config');
    await store.refresh();
    assert.equal(await store.instanceGroup('nodes-us-test-1a'), good);
    assert.equal((await store.cluster()).metadata.name, 'minimal.example.com');
    assert.deepEqual(errors.map((e) => e.error instanceof NotFoundError).sort(), [true, true]);
    assert.ok(store.lastError('cluster') instanceof NotFoundError);
  });

  test('objects served from their last good version are exported while the store polls; a deleted instance group is not one', async () => {
    const { base } = await seededMemfs();
    const registry = new Registry();
    const store = new ClusterStore(base, { pollIntervalMs: 60_000, registry });
    await store.cluster();
    await store.instanceGroup('nodes-us-test-1a');
    await store.instanceGroup('control-plane-us-test-1a');
    const stale = async () =>
      (await registry.metrics())
        .split('\n')
        .filter((line) => line.startsWith(`${staleObjectsMetric}{`))
        .sort();
    store.start();
    try {
      assert.deepEqual(await stale(), []);
      await base.write('instancegroup/nodes-us-test-1a', nodesYaml.replace('role: Node', 'role: [Node'));
      await base.delete('instancegroup/control-plane-us-test-1a');
      await store.refresh();
      assert.deepEqual(await stale(), [`${staleObjectsMetric}{path="instancegroup/nodes-us-test-1a"} 1`]);
      await base.write('instancegroup/nodes-us-test-1a', nodesYaml);
      await store.refresh();
      assert.deepEqual(await stale(), []);
      await base.write('instancegroup/nodes-us-test-1a', nodesYaml.replace('role: Node', 'role: [Node'));
      await store.refresh();
      store.stop();
      assert.deepEqual(
        await stale(),
        [],
        'a store that does not poll (a replica that does not lead) says nothing',
      );
    } finally {
      store.stop();
    }
  });

  test('start() polls on its own and stop() ends it', async () => {
    const { base } = await seededMemfs();
    const store = new ClusterStore(base, { pollIntervalMs: 10 });
    await store.instanceGroup('nodes-us-test-1a');
    store.start();
    store.start();
    try {
      const changed = once(store, 'instanceGroup');
      await base.write('instancegroup/nodes-us-test-1a', nodesYaml.replace('minSize: 2', 'minSize: 1'));
      const [ig] = await changed;
      assert.equal(ig.spec.minSize, 1);
    } finally {
      store.stop();
    }
  });
});

describe('seedClusterStore', () => {
  test('refuses invalid objects before writing anything', async () => {
    const root = openVfs(`memfs://seed-${++storeCounter}`);
    await assert.rejects(
      seedClusterStore(root, 'c.example.com', {
        cluster: aws.cluster,
        instanceGroups: [nodesYaml.replace('role: Node', 'role: Nope')],
      }),
      /seed instance group 1: spec\.role/,
    );
    assert.deepEqual(await root.list(''), []);
  });

  test('writes config, cluster-completed.spec and one file per instance group', async () => {
    const { root } = await seededMemfs();
    assert.deepEqual(await root.list(''), [
      'minimal.example.com/cluster-completed.spec',
      'minimal.example.com/config',
      'minimal.example.com/instancegroup/control-plane-us-test-1a',
      'minimal.example.com/instancegroup/high-memory-us-test-1b',
      'minimal.example.com/instancegroup/nodes-us-test-1a',
    ]);
  });
});

describe('ClusterStore on the cloud backends', async () => {
  const s3 = await startS3Sim({ buckets: ['kops-state'] });
  const gcs = await startGcsSim({ buckets: ['kops-state'], token: 'tok' });
  after(() => Promise.all([s3.close(), gcs.close()]));
  const auth = new OAuth2Client();
  auth.setCredentials({ access_token: 'tok', expiry_date: Date.now() + 3_600_000 });
  const backends = [
    {
      name: 's3',
      url: 's3://kops-state',
      options: { s3: { endpoint: s3.endpoint, region: 'us-test-1', credentials: s3.credentials } },
      sim: s3,
      // The SDK tries each request three times: fail every attempt of the two stats of one refresh.
      outageRequests: 6,
    },
    {
      name: 'gs',
      url: 'gs://kops-state',
      options: { gcs: { endpoint: gcs.endpoint, auth } },
      sim: gcs,
      outageRequests: 2,
    },
  ];

  test('s3: a deleted instance group is checked less and less often, not every poll; listed again, it is read again at once', async () => {
    const options = backends[0]?.options as { s3: { endpoint: string } };
    const base = `s3://kops-state/deleted-${++storeCounter}`;
    await seedClusterStore(openVfs(base, options), aws.name, aws);
    const store = new ClusterStore(openVfs(`${base}/${aws.name}`, options));
    await store.instanceGroup('nodes-us-test-1a');
    const deleted = await store.instanceGroup('control-plane-us-test-1a');
    const key = `deleted-${storeCounter}/${aws.name}/instancegroup/control-plane-us-test-1a`;
    const controlPlaneYaml = aws.instanceGroups.find((t) => t.includes('name: control-plane-us-test-1a'))!;
    s3.deleteObject('kops-state', key);
    const heads = () => s3.requestCounts()['HeadObject'] ?? 0;
    const before = heads();
    const passes = 200;
    for (let i = 0; i < passes; i++) await store.refresh();
    // One HEAD a pass for the group that exists; the deleted one a handful of times in all.
    const spent = heads() - before;
    assert.ok(spent >= passes, `${spent} HEADs`);
    assert.ok(spent - passes <= 10, `the deleted group cost ${spent - passes} HEADs in ${passes} polls`);
    assert.equal(
      await store.instanceGroup('control-plane-us-test-1a'),
      deleted,
      'its last good object is kept',
    );
    assert.ok(store.lastError({ instanceGroup: 'control-plane-us-test-1a' }) instanceof NotFoundError);

    // `kops create ig` again: the next listing brings it back into every poll.
    s3.putObject('kops-state', key, controlPlaneYaml.replace('maxSize: 1', 'maxSize: 2'));
    assert.ok((await store.instanceGroups()).some((g) => g.metadata.name === 'control-plane-us-test-1a'));
    const changed = once(store, 'instanceGroup');
    await store.refresh();
    const [ig] = await changed;
    assert.equal(ig.spec.maxSize, 2);
    assert.equal(store.lastError({ instanceGroup: 'control-plane-us-test-1a' }), undefined);
  });

  for (const backend of backends) {
    test(`${backend.name}: reads the seeded layout, detects an edit, survives an outage`, async () => {
      await seedClusterStore(openVfs(backend.url, backend.options), aws.name, aws);
      const store = new ClusterStore(openVfs(`${backend.url}/${aws.name}`, backend.options));
      assert.equal((await store.cluster()).metadata.name, aws.name);
      const before = await store.instanceGroup('nodes-us-test-1a');

      const errors = readErrors(store);
      backend.sim.failNext(backend.outageRequests);
      await store.refresh();
      assert.equal(
        await store.instanceGroup('nodes-us-test-1a'),
        before,
        'an outage keeps the cached object',
      );
      assert.ok(errors.length > 0);

      const changed = once(store, 'instanceGroup');
      backend.sim.putObject(
        'kops-state',
        `${aws.name}/instancegroup/nodes-us-test-1a`,
        nodesYaml.replace('maxSize: 3', 'maxSize: 9'),
      );
      await store.refresh();
      const [ig] = await changed;
      assert.equal(ig.spec.maxSize, 9);
    });
  }
});
