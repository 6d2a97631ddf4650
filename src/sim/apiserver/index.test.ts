/** Contract tests through the production client, @kubernetes/client-node, over HTTPS. */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  ApiException,
  AuthenticationV1Api,
  AuthorizationV1Api,
  CertificatesV1Api,
  CoordinationV1Api,
  CoreV1Api,
  KubeConfig,
  PatchStrategy,
  setHeaderOptions,
  V1MicroTime,
  Watch,
} from '@kubernetes/client-node';
import { createLogger } from '../../log.ts';
import { createCertificateAuthority, createCertificateRequest, issueClientCertificate } from '../tls.ts';
import { type SimApiServer, startApiServer } from './index.ts';

/** A base64 PEM CSR, as `spec.request` carries it. */
async function csrRequest(commonName: string): Promise<string> {
  const { csr } = await createCertificateRequest({ name: commonName, groups: ['system:nodes'] });
  return Buffer.from(csr).toString('base64');
}

/** The Status body of a failed call. */
function statusOf(err: unknown): {
  code: number;
  reason: string;
  message: string;
  details?: Record<string, unknown>;
} {
  assert.ok(err instanceof ApiException, `expected an ApiException, got ${String(err)}`);
  // The generated client drops the body of a 401 (its OpenAPI spec declares none); raw tests check that body.
  if (err.code === 401 && err.body === undefined)
    return { code: 401, reason: 'Unauthorized', message: 'Unauthorized' };
  return JSON.parse(err.body as string);
}

async function rejectsWith(
  promise: Promise<unknown>,
  code: number,
  reason?: string,
): Promise<ReturnType<typeof statusOf>> {
  try {
    await promise;
  } catch (err) {
    const status = statusOf(err);
    assert.equal(status.code, code, status.message);
    if (reason) assert.equal(status.reason, reason);
    return status;
  }
  assert.fail(`expected HTTP ${code}`);
}

interface WatchEvent {
  type: string;
  object: { metadata?: { name?: string; resourceVersion?: string }; code?: number; message?: string };
}

/** Opens a watch and collects its events; `until` resolves once `count` events arrived. */
async function watchEvents(kc: KubeConfig, path: string, query: Record<string, string | number | boolean>) {
  const events: WatchEvent[] = [];
  const waiters: { count: number; resolve: () => void }[] = [];
  let ended: (err: unknown) => void = () => undefined;
  const done = new Promise<unknown>((resolve) => {
    ended = resolve;
  });
  const controller = await new Watch(kc).watch(
    path,
    query,
    (type, object) => {
      events.push({ type, object });
      for (const w of waiters.filter((w) => events.length >= w.count)) w.resolve();
    },
    (err) => ended(err),
  );
  return {
    events,
    done,
    until: (count: number) =>
      new Promise<void>((resolve) => {
        if (events.length >= count) resolve();
        else waiters.push({ count, resolve });
      }),
    stop: () => controller.abort(),
  };
}

describe('simulated apiserver through @kubernetes/client-node', () => {
  let sim: SimApiServer;
  let core: CoreV1Api;
  let certs: CertificatesV1Api;
  before(async () => {
    sim = await startApiServer({ bookmarkIntervalMs: 50 });
    core = sim.kubeConfig().makeApiClient(CoreV1Api);
    certs = sim.kubeConfig().makeApiClient(CertificatesV1Api);
  });
  after(() => sim.close());

  test('serves the namespaces every cluster starts with', async () => {
    const list = await core.listNamespace();
    assert.deepEqual(
      list.items.map((n) => n.metadata?.name),
      ['default', 'kube-node-lease', 'kube-public', 'kube-system'],
    );
    assert.equal(list.items[0]?.status?.phase, 'Active');
  });

  test('creates, reads, updates and deletes with generated metadata', async () => {
    const created = await core.createNamespacedConfigMap({
      namespace: 'default',
      body: { metadata: { generateName: 'cfg-' }, data: { a: '1' } },
    });
    const name = created.metadata?.name as string;
    assert.match(name, /^cfg-[a-z0-9]{5}$/);
    assert.match(created.metadata?.uid ?? '', /^[0-9a-f-]{36}$/);
    assert.ok(created.metadata?.creationTimestamp instanceof Date);
    assert.equal(created.metadata?.generation, 1);
    const read = await core.readNamespacedConfigMap({ name, namespace: 'default' });
    assert.equal(read.metadata?.resourceVersion, created.metadata?.resourceVersion);
    read.data = { a: '2' };
    const updated = await core.replaceNamespacedConfigMap({ name, namespace: 'default', body: read });
    assert.equal(updated.data?.a, '2');
    assert.ok(Number(updated.metadata?.resourceVersion) > Number(created.metadata?.resourceVersion));
    assert.equal(updated.metadata?.generation, 2);
    await core.deleteNamespacedConfigMap({ name, namespace: 'default' });
    await rejectsWith(core.readNamespacedConfigMap({ name, namespace: 'default' }), 404, 'NotFound');
  });

  test('answers conflicts, duplicates and missing namespaces like the API', async () => {
    await core.createNode({ body: { metadata: { name: 'conflict-node' } } });
    const stale = await core.readNode({ name: 'conflict-node' });
    await core.patchNode(
      { name: 'conflict-node', body: { metadata: { labels: { touched: 'yes' } } } },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
    const conflict = await rejectsWith(
      core.replaceNode({ name: 'conflict-node', body: stale }),
      409,
      'Conflict',
    );
    assert.equal(
      conflict.message,
      'Operation cannot be fulfilled on nodes "conflict-node": the object has been modified; please apply your changes to the latest version and try again',
    );
    const exists = await rejectsWith(
      core.createNode({ body: { metadata: { name: 'conflict-node' } } }),
      409,
      'AlreadyExists',
    );
    assert.equal(exists.message, 'nodes "conflict-node" already exists');
    const missing = await rejectsWith(
      core.createNamespacedConfigMap({ namespace: 'nowhere', body: { metadata: { name: 'x' } } }),
      404,
      'NotFound',
    );
    assert.equal(missing.message, 'namespaces "nowhere" not found');
    const bad = await rejectsWith(
      core.createNode({ body: { metadata: { name: 'Not_A_Name' } } }),
      422,
      'Invalid',
    );
    assert.match(
      bad.message,
      /^Node "Not_A_Name" is invalid: metadata.name: Invalid value: "Not_A_Name": a lowercase RFC 1123 subdomain/,
    );
    const causes = bad.details?.['causes'] as { field: string }[];
    assert.equal(causes[0]?.field, 'metadata.name');
  });

  test('pages lists with limit and continue at one resourceVersion', async () => {
    await core.createNamespace({ body: { metadata: { name: 'paging' } } });
    for (let i = 0; i < 7; i++) {
      await core.createNamespacedPod({
        namespace: 'paging',
        body: {
          metadata: { name: `p${i}`, labels: { app: i % 2 ? 'odd' : 'even' } },
          spec: { containers: [{ name: 'c', image: 'i' }] },
        },
      });
    }
    const first = await core.listNamespacedPod({ namespace: 'paging', limit: 3 });
    assert.deepEqual(
      first.items.map((p) => p.metadata?.name),
      ['p0', 'p1', 'p2'],
    );
    assert.equal(first.metadata?.remainingItemCount, 4);
    // Changes after the first page do not show up in later pages of the same list.
    await core.deleteNamespacedPod({ namespace: 'paging', name: 'p5' });
    const second = await core.listNamespacedPod({
      namespace: 'paging',
      limit: 3,
      _continue: first.metadata?._continue as string,
    });
    assert.deepEqual(
      second.items.map((p) => p.metadata?.name),
      ['p3', 'p4', 'p5'],
    );
    assert.equal(second.metadata?.resourceVersion, first.metadata?.resourceVersion);
    const third = await core.listNamespacedPod({
      namespace: 'paging',
      limit: 3,
      _continue: second.metadata?._continue as string,
    });
    assert.deepEqual(
      third.items.map((p) => p.metadata?.name),
      ['p6'],
    );
    assert.equal(third.metadata?._continue, undefined);
    const latest = await core.listNamespacedPod({ namespace: 'paging' });
    assert.equal(latest.items.length, 6);
  });

  test('expires continue tokens after a compaction with the real message', async () => {
    const first = await core.listNamespace({ limit: 1 });
    await core.createNamespace({ body: { metadata: { name: 'after-compaction' } } });
    sim.store.compact();
    const expired = await rejectsWith(
      core.listNamespace({ limit: 1, _continue: first.metadata?._continue as string }),
      410,
      'Expired',
    );
    assert.match(
      expired.message,
      /^The provided continue parameter is too old to display a consistent list result/,
    );
  });

  test('reads an exact past resourceVersion and refuses a future one', async () => {
    await core.createNamespacedConfigMap({
      namespace: 'default',
      body: { metadata: { name: 'exact' }, data: { v: '1' } },
    });
    const then = (await core.listNamespacedConfigMap({ namespace: 'default' })).metadata
      ?.resourceVersion as string;
    await core.patchNamespacedConfigMap(
      { namespace: 'default', name: 'exact', body: { data: { v: '2' } } },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
    const past = await core.listNamespacedConfigMap({
      namespace: 'default',
      resourceVersion: then,
      resourceVersionMatch: 'Exact',
    });
    assert.equal(past.metadata?.resourceVersion, then);
    assert.equal(past.items.find((c) => c.metadata?.name === 'exact')?.data?.['v'], '1');
    const notOlder = await core.listNamespacedConfigMap({
      namespace: 'default',
      resourceVersion: then,
      resourceVersionMatch: 'NotOlderThan',
    });
    assert.equal(notOlder.items.find((c) => c.metadata?.name === 'exact')?.data?.['v'], '2');
    const future = await rejectsWith(
      core.listNamespacedConfigMap({ namespace: 'default', resourceVersion: '999999999' }),
      504,
      'Timeout',
    );
    assert.match(future.message, /^Too large resource version: 999999999, current: \d+$/);
  });

  test('close() ends open watch streams promptly', async () => {
    const other = await startApiServer();
    const watch = await watchEvents(other.kubeConfig(), '/api/v1/nodes', {});
    while (other.faults.openWatches === 0) await new Promise((resolve) => setImmediate(resolve));
    await other.close();
    await watch.done;
    assert.equal(other.faults.openWatches, 0);
  });

  test('filters by label and field selectors', async () => {
    const even = await core.listNamespacedPod({ namespace: 'paging', labelSelector: 'app=even' });
    assert.deepEqual(
      even.items.map((p) => p.metadata?.name),
      ['p0', 'p2', 'p4', 'p6'],
    );
    const notOdd = await core.listPodForAllNamespaces({ labelSelector: 'app in (odd),app!=even' });
    assert.deepEqual(
      notOdd.items.map((p) => p.metadata?.name),
      ['p1', 'p3'],
    );
    const named = await core.listNamespacedPod({ namespace: 'paging', fieldSelector: 'metadata.name=p3' });
    assert.deepEqual(
      named.items.map((p) => p.metadata?.name),
      ['p3'],
    );
    const pending = await core.listPodForAllNamespaces({
      fieldSelector: 'status.phase=Pending,spec.nodeName=',
    });
    assert.equal(pending.items.length, 6);
    const unsupported = await rejectsWith(
      core.listNode({ fieldSelector: 'spec.podCIDR=x' }),
      400,
      'BadRequest',
    );
    assert.equal(unsupported.message, 'field label not supported: spec.podCIDR');
    const badLabel = await rejectsWith(core.listNode({ labelSelector: 'a in (b' }), 400, 'BadRequest');
    assert.match(badLabel.message, /^unable to parse requirement/);
  });

  test('watches from a resourceVersion, including selector transitions and deletes', async () => {
    await core.createNode({ body: { metadata: { name: 'w1', labels: { pool: 'a' } } } });
    const list = await core.listNode({ labelSelector: 'pool=a' });
    const watch = await watchEvents(sim.kubeConfig(), '/api/v1/nodes', {
      resourceVersion: list.metadata?.resourceVersion as string,
      labelSelector: 'pool=a',
    });
    await core.createNode({ body: { metadata: { name: 'w2', labels: { pool: 'a' } } } });
    await core.createNode({ body: { metadata: { name: 'w3', labels: { pool: 'b' } } } });
    await core.patchNode(
      { name: 'w1', body: { metadata: { labels: { pool: 'b' } } } },
      setHeaderOptions('Content-Type', PatchStrategy.StrategicMergePatch),
    );
    await core.deleteNode({ name: 'w2' });
    await watch.until(3);
    watch.stop();
    assert.deepEqual(
      watch.events.map((e) => `${e.type} ${e.object.metadata?.name}`),
      ['ADDED w2', 'DELETED w1', 'DELETED w2'],
    );
  });

  test('replays history to a watch that starts in the past', async () => {
    const before = (await core.listNode()).metadata?.resourceVersion as string;
    await core.createNode({ body: { metadata: { name: 'replayed' } } });
    await core.deleteNode({ name: 'replayed' });
    const watch = await watchEvents(sim.kubeConfig(), '/api/v1/nodes', { resourceVersion: before });
    await watch.until(2);
    watch.stop();
    assert.deepEqual(
      watch.events.map((e) => `${e.type} ${e.object.metadata?.name}`),
      ['ADDED replayed', 'DELETED replayed'],
    );
  });

  test('ends a watch from a compacted resourceVersion with an in-stream 410', async () => {
    const old = (await core.listNode()).metadata?.resourceVersion as string;
    await core.createNode({ body: { metadata: { name: 'compacted' } } });
    sim.store.compact();
    const watch = await watchEvents(sim.kubeConfig(), '/api/v1/nodes', { resourceVersion: old });
    await watch.done;
    assert.equal(watch.events.length, 1);
    assert.equal(watch.events[0]?.type, 'ERROR');
    assert.equal(watch.events[0]?.object.code, 410);
    assert.match(watch.events[0]?.object.message ?? '', /^too old resource version: \d+ \(\d+\)$/);
  });

  test('bookmarks a watch only once its resource has moved past the watch’s start, as the cacher does', async () => {
    const rv = (await core.listNode()).metadata?.resourceVersion as string;
    const watch = await watchEvents(sim.kubeConfig(), '/api/v1/nodes', {
      resourceVersion: rv,
      allowWatchBookmarks: true,
      timeoutSeconds: 1,
    });
    // Other resources change; the Node watch cache does not move: six intervals without a bookmark.
    await core.createNamespacedConfigMap({
      namespace: 'default',
      body: { metadata: { name: 'not-a-node' } },
    });
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(watch.events.length, 0, JSON.stringify(watch.events));
    const node = await core.createNode({ body: { metadata: { name: 'moves-the-cache' } } });
    await watch.until(3);
    assert.equal(watch.events[0]?.type, 'ADDED');
    // The cache's last change, every interval, the same version again while nothing else happens.
    for (const event of watch.events.slice(1)) {
      assert.equal(event.type, 'BOOKMARK');
      assert.equal(event.object.metadata?.resourceVersion, node.metadata?.resourceVersion);
    }
    assert.equal(await watch.done, null, 'ended by timeoutSeconds');
  });

  test('an etcd progress notification, or a consistent list of the resource, moves a quiet watch cache to now', async () => {
    const rv = (await core.listNode()).metadata?.resourceVersion as string;
    const watch = await watchEvents(sim.kubeConfig(), '/api/v1/nodes', {
      resourceVersion: rv,
      allowWatchBookmarks: true,
      timeoutSeconds: 2,
    });
    const other = async (name: string) =>
      (await core.createNamespacedConfigMap({ namespace: 'default', body: { metadata: { name } } })).metadata
        ?.resourceVersion as string;
    const first = await other('progress-1');
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal(watch.events.length, 0, JSON.stringify(watch.events));
    // A list without a resourceVersion is served from the cache once etcd reported progress to it.
    await core.listNode();
    await watch.until(1);
    assert.equal(watch.events[0]?.type, 'BOOKMARK');
    assert.equal(watch.events[0]?.object.metadata?.resourceVersion, first);
    const second = await other('progress-2');
    // etcd's own notification (every 10 minutes by default) reaches every resource's cache.
    sim.store.notifyProgress();
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal(watch.events.at(-1)?.object.metadata?.resourceVersion, second);
    assert.ok(watch.events.every((e) => e.type === 'BOOKMARK'));
    watch.stop();
  });

  test('a running server’s bookmark interval can be changed for the watches opened after; a bookmark comes 2 s before the timeout', async () => {
    // Started with the apiserver's one-minute default, as `dev`'s cluster is.
    const slow = await startApiServer();
    try {
      assert.equal(slow.bookmarkIntervalMs, 60_000);
      const core = slow.kubeConfig().makeApiClient(CoreV1Api);
      const rv = String(slow.store.resourceVersion);
      const beforeTimeout = await watchEvents(slow.kubeConfig(), '/api/v1/nodes', {
        resourceVersion: rv,
        allowWatchBookmarks: true,
        timeoutSeconds: 3,
      });
      slow.bookmarkIntervalMs = 50;
      assert.equal(slow.bookmarkIntervalMs, 50);
      const frequent = await watchEvents(slow.kubeConfig(), '/api/v1/nodes', {
        resourceVersion: rv,
        allowWatchBookmarks: true,
        timeoutSeconds: 1,
      });
      const started = performance.now();
      const node = await core.createNode({ body: { metadata: { name: 'changed' } } });
      assert.equal(await frequent.done, null);
      assert.ok(frequent.events.length >= 3, 'the change, then bookmarks every 50 ms within the 1 s watch');
      assert.ok(frequent.events.slice(1).every((e) => e.type === 'BOOKMARK'));
      await beforeTimeout.until(2);
      const at = performance.now() - started;
      assert.deepEqual(
        beforeTimeout.events.map((e) => [e.type, e.object.metadata?.resourceVersion]),
        [
          ['ADDED', node.metadata?.resourceVersion],
          ['BOOKMARK', node.metadata?.resourceVersion],
        ],
      );
      assert.ok(at > 500 && at < 2_000, `the pre-timeout bookmark came at ${Math.round(at)} ms, not at 1 s`);
      assert.equal(await beforeTimeout.done, null);
    } finally {
      await slow.close();
    }
  });

  test('sends the initial state and then an initial-events-end bookmark when asked', async () => {
    const watch = await watchEvents(sim.kubeConfig(), '/api/v1/namespaces', {
      sendInitialEvents: true,
      resourceVersionMatch: 'NotOlderThan',
      allowWatchBookmarks: true,
      resourceVersion: '',
    });
    const initial = (await core.listNamespace()).items.length;
    await watch.until(initial + 1);
    watch.stop();
    assert.ok(watch.events.slice(0, initial).every((e) => e.type === 'ADDED'));
    const bookmark = watch.events[initial] as {
      type: string;
      object: { metadata: { annotations?: Record<string, string> } };
    };
    assert.equal(bookmark.type, 'BOOKMARK');
    assert.equal(bookmark.object.metadata.annotations?.['k8s.io/initial-events-end'], 'true');
  });

  test('applies JSON, merge and strategic merge patches as the API does', async () => {
    await core.createNode({
      body: {
        metadata: { name: 'patched', labels: { keep: 'a', drop: 'b' } },
        spec: { taints: [{ key: 'one', effect: 'NoSchedule' }] },
      },
    });
    await core.patchNodeStatus(
      {
        name: 'patched',
        body: {
          status: {
            conditions: [
              { type: 'Ready', status: 'False' },
              { type: 'DiskPressure', status: 'False' },
            ],
          },
        },
      },
      setHeaderOptions('Content-Type', PatchStrategy.StrategicMergePatch),
    );
    const smp = await core.patchNode(
      {
        name: 'patched',
        body: {
          metadata: { labels: { drop: null, added: 'c' } },
          spec: { taints: [{ key: 'two', effect: 'NoExecute' }] },
        },
      },
      setHeaderOptions('Content-Type', PatchStrategy.StrategicMergePatch),
    );
    assert.deepEqual(smp.metadata?.labels, { keep: 'a', added: 'c' });
    // Taints carry no merge key in the API: a strategic patch replaces the list.
    assert.deepEqual(
      smp.spec?.taints?.map((t) => t.key),
      ['two'],
    );
    const status = await core.patchNodeStatus(
      { name: 'patched', body: { status: { conditions: [{ type: 'Ready', status: 'True' }] } } },
      setHeaderOptions('Content-Type', PatchStrategy.StrategicMergePatch),
    );
    assert.deepEqual(
      status.status?.conditions?.map((c) => `${c.type}=${c.status}`),
      ['Ready=True', 'DiskPressure=False'],
    );
    const merged = await core.patchNode(
      { name: 'patched', body: { spec: { unschedulable: true } } },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
    assert.equal(merged.spec?.unschedulable, true);
    const jsonPatched = await core.patchNode({
      name: 'patched',
      body: [
        { op: 'test', path: '/metadata/labels/keep', value: 'a' },
        { op: 'add', path: '/metadata/labels/json', value: 'yes' },
      ],
    });
    assert.equal(jsonPatched.metadata?.labels?.['json'], 'yes');
    const failedTest = await rejectsWith(
      core.patchNode({ name: 'patched', body: [{ op: 'test', path: '/metadata/labels/keep', value: 'z' }] }),
      422,
      'Invalid',
    );
    assert.match(JSON.stringify(failedTest.details), /test failed/);
    // Writes to the main resource leave the status alone, and the reverse.
    const main = await core.patchNode(
      { name: 'patched', body: { status: { phase: 'Running' } } },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
    assert.equal(main.status?.phase, undefined);
    const apply = await rejectsWith(
      core.patchNode(
        { name: 'patched', body: {} },
        setHeaderOptions('Content-Type', PatchStrategy.ServerSideApply),
      ),
      415,
      'UnsupportedMediaType',
    );
    assert.match(apply.message, /application\/strategic-merge-patch\+json/);
  });

  test('stores leases with MicroTime and conflicts on stale renewals', async () => {
    const coord = sim.kubeConfig().makeApiClient(CoordinationV1Api);
    const lease = await coord.createNamespacedLease({
      namespace: 'kube-system',
      body: {
        metadata: { name: 'leader' },
        spec: { holderIdentity: 'a', leaseDurationSeconds: 15, renewTime: new V1MicroTime(Date.now()) },
      },
    });
    assert.match(String(lease.spec?.renewTime), /\.\d{6}Z$/);
    const renewed = await coord.replaceNamespacedLease({
      name: 'leader',
      namespace: 'kube-system',
      body: { ...lease, spec: { ...lease.spec, renewTime: new V1MicroTime(Date.now() + 1000) } },
    });
    assert.notEqual(renewed.metadata?.resourceVersion, lease.metadata?.resourceVersion);
    await rejectsWith(
      coord.replaceNamespacedLease({
        name: 'leader',
        namespace: 'kube-system',
        body: { ...lease, spec: { ...lease.spec, holderIdentity: 'b' } },
      }),
      409,
      'Conflict',
    );
  });

  test('runs the CSR lifecycle with the API rules', async () => {
    const nodeUser = { name: 'system:node:csr-node', groups: ['system:nodes'] };
    const nodeCerts = sim.kubeConfig(nodeUser).makeApiClient(CertificatesV1Api);
    const created = await nodeCerts.createCertificateSigningRequest({
      body: {
        metadata: { name: 'csr-1' },
        spec: {
          request: await csrRequest('system:node:csr-node'),
          signerName: 'kubernetes.io/kube-apiserver-client-kubelet',
          usages: ['digital signature', 'client auth'],
          username: 'someone-else',
          groups: ['system:masters'],
        },
      },
    });
    // The requester comes from authentication, never from the body.
    assert.equal(created.spec.username, 'system:node:csr-node');
    assert.deepEqual(created.spec.groups, ['system:nodes', 'system:authenticated']);
    assert.equal(created.status?.conditions, undefined);
    assert.equal(created.status?.certificate, undefined);
    const own = await nodeCerts.readCertificateSigningRequest({ name: 'csr-1' });
    assert.equal(own.metadata?.name, 'csr-1');

    const csr = await certs.readCertificateSigningRequest({ name: 'csr-1' });
    csr.spec.signerName = 'example.com/changed';
    csr.status = { certificate: Buffer.from('x').toString('base64') };
    const replaced = await certs.replaceCertificateSigningRequest({ name: 'csr-1', body: csr });
    assert.equal(replaced.spec.signerName, 'kubernetes.io/kube-apiserver-client-kubelet');
    assert.equal(replaced.status?.certificate, undefined);

    const toApprove = await certs.readCertificateSigningRequest({ name: 'csr-1' });
    toApprove.status = {
      conditions: [
        {
          type: 'Approved',
          status: 'True',
          reason: 'Test',
          message: 'approved by test',
          lastUpdateTime: new Date(),
        },
      ],
    };
    const approved = await certs.replaceCertificateSigningRequestApproval({ name: 'csr-1', body: toApprove });
    assert.equal(approved.status?.conditions?.[0]?.type, 'Approved');
    assert.ok(approved.status?.conditions?.[0]?.lastTransitionTime instanceof Date);

    const both = await certs.readCertificateSigningRequest({ name: 'csr-1' });
    both.status?.conditions?.push({ type: 'Denied', status: 'True', reason: 'Test', message: 'no' });
    const exclusive = await rejectsWith(
      certs.replaceCertificateSigningRequestApproval({ name: 'csr-1', body: both }),
      422,
      'Invalid',
    );
    assert.match(exclusive.message, /Approved and Denied conditions are mutually exclusive/);

    const removing = await certs.readCertificateSigningRequest({ name: 'csr-1' });
    (removing.status as { conditions: unknown[] }).conditions = [];
    const removed = await rejectsWith(
      certs.replaceCertificateSigningRequestApproval({ name: 'csr-1', body: removing }),
      422,
      'Invalid',
    );
    assert.match(removed.message, /updates may not remove a condition of type "Approved"/);

    // Only /approval may add Approved or Denied (validation.go, allowSettingApprovalConditions).
    const denying = await certs.readCertificateSigningRequest({ name: 'csr-1' });
    denying.status?.conditions?.push({ type: 'Denied', status: 'True', reason: 'X', message: 'x' });
    const viaStatus = await rejectsWith(
      certs.replaceCertificateSigningRequestStatus({ name: 'csr-1', body: denying }),
      422,
    );
    assert.match(viaStatus.message, /updates may not add a condition of type "Denied"/);

    const signing = await certs.readCertificateSigningRequest({ name: 'csr-1' });
    // A real certificate: the API parses every CERTIFICATE block (validateCertificate).
    const pem = sim.caCertificate;
    signing.status = { ...signing.status, certificate: Buffer.from(pem).toString('base64') };
    const viaApprovalCert = await certs.replaceCertificateSigningRequestApproval({
      name: 'csr-1',
      body: signing,
    });
    assert.equal(viaApprovalCert.status?.certificate, undefined);
    const signed = await certs.replaceCertificateSigningRequestStatus({ name: 'csr-1', body: signing });
    assert.equal(Buffer.from(signed.status?.certificate as string, 'base64').toString(), pem);

    const other = { name: 'system:node:other', groups: ['system:nodes'] };
    const foreign = await rejectsWith(
      sim.kubeConfig(other).makeApiClient(CertificatesV1Api).readCertificateSigningRequest({ name: 'csr-1' }),
      403,
      'Forbidden',
    );
    assert.equal(
      foreign.message,
      'certificatesigningrequests.certificates.k8s.io "csr-1" is forbidden: User "system:node:other" cannot get resource "certificatesigningrequests" in API group "certificates.k8s.io" at the cluster scope',
    );
  });

  test('rejects CSRs without a signer, with a bad request, or too short a lifetime', async () => {
    const invalid = await rejectsWith(
      certs.createCertificateSigningRequest({
        body: {
          metadata: { name: 'bad-csr' },
          spec: {
            request: Buffer.from('not pem').toString('base64'),
            usages: ['client auth'],
            expirationSeconds: 60,
          } as never,
        },
      }),
      422,
      'Invalid',
    );
    assert.match(invalid.message, /spec.request: Invalid value/);
    assert.match(invalid.message, /spec.signerName: Required value/);
    assert.match(invalid.message, /spec.expirationSeconds: Invalid value: 60/);
  });

  test('deletes collections of CSRs by selector', async () => {
    for (const name of ['dc-1', 'dc-2']) {
      await certs.createCertificateSigningRequest({
        body: {
          metadata: { name, labels: { batch: 'x' } },
          spec: {
            request: await csrRequest(name),
            signerName: 'example.com/signer',
            usages: ['client auth'],
          },
        },
      });
    }
    await certs.deleteCollectionCertificateSigningRequest({ labelSelector: 'batch=x' });
    const left = await certs.listCertificateSigningRequest({ labelSelector: 'batch=x' });
    assert.equal(left.items.length, 0);
  });

  test('answers TokenReview and SubjectAccessReview from its own authn and authz', async () => {
    sim.addToken('node-token', { name: 'system:node:n9', groups: ['system:nodes'] });
    const authn = sim.kubeConfig().makeApiClient(AuthenticationV1Api);
    const ok = await authn.createTokenReview({ body: { spec: { token: 'node-token' } } });
    assert.equal(ok.status?.authenticated, true);
    assert.equal(ok.status?.user?.username, 'system:node:n9');
    assert.deepEqual(ok.status?.user?.groups, ['system:nodes', 'system:authenticated']);
    const bad = await authn.createTokenReview({ body: { spec: { token: 'nope' } } });
    assert.notEqual(bad.status?.authenticated, true);

    const authz = sim.kubeConfig().makeApiClient(AuthorizationV1Api);
    const review = (verb: string, resource: string, user: string, groups: string[], name?: string) =>
      authz.createSubjectAccessReview({
        body: {
          spec: {
            user,
            groups,
            resourceAttributes: { verb, resource, group: '', ...(name ? { name } : {}) },
          },
        },
      });
    assert.equal((await review('get', 'nodes', 'system:node:n9', ['system:nodes'])).status?.allowed, true);
    assert.equal(
      (await review('patch', 'nodes', 'system:node:n9', ['system:nodes'], 'n9')).status?.allowed,
      true,
    );
    assert.equal(
      (await review('patch', 'nodes', 'system:node:n9', ['system:nodes'], 'n8')).status?.allowed,
      false,
    );
    assert.equal((await review('delete', 'pods', 'alice', [])).status?.allowed, false);
    sim.grant({ user: 'alice', verbs: ['delete'], resources: ['pods'] });
    assert.equal((await review('delete', 'pods', 'alice', [])).status?.allowed, true);
  });

  test('authenticates client certificates from its CA and from clientCAs', async () => {
    const outsideCa = await createCertificateAuthority('outside');
    const withExtra = await startApiServer({ clientCAs: [outsideCa.certificate] });
    try {
      const client = await issueClientCertificate(outsideCa, {
        name: 'system:node:cert-node',
        groups: ['system:nodes'],
      });
      const kc = new KubeConfig();
      kc.loadFromOptions({
        clusters: [
          {
            name: 'sim',
            server: withExtra.url,
            caData: Buffer.from(withExtra.caCertificate).toString('base64'),
          },
        ],
        users: [
          {
            name: 'node',
            certData: Buffer.from(client.certificate).toString('base64'),
            keyData: Buffer.from(client.privateKey).toString('base64'),
          },
        ],
        contexts: [{ name: 'sim', cluster: 'sim', user: 'node' }],
        currentContext: 'sim',
      });
      const nodeCore = kc.makeApiClient(CoreV1Api);
      assert.ok(Array.isArray((await nodeCore.listNode()).items));
      const denied = await rejectsWith(
        nodeCore.listNamespacedSecret({ namespace: 'default' }),
        403,
        'Forbidden',
      );
      assert.equal(
        denied.message,
        'secrets is forbidden: User "system:node:cert-node" cannot list resource "secrets" in API group "" in the namespace "default"',
      );
      const stranger = await createCertificateAuthority('stranger');
      const untrusted = await issueClientCertificate(stranger, { name: 'admin', groups: ['system:masters'] });
      kc.users[0] = {
        name: 'node',
        certData: Buffer.from(untrusted.certificate).toString('base64'),
        keyData: Buffer.from(untrusted.privateKey).toString('base64'),
      };
      await rejectsWith(kc.makeApiClient(CoreV1Api).listNode(), 401, 'Unauthorized');
    } finally {
      await withExtra.close();
    }
  });

  test('lets a kubelet with a certificate from the server CA register only its own node', async () => {
    const client = await issueClientCertificate(sim.certificateAuthority, {
      name: 'system:node:self',
      groups: ['system:nodes'],
    });
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [
        {
          name: 'sim',
          server: sim.url,
          caData: Buffer.from(sim.caCertificate).toString('base64'),
          skipTLSVerify: false,
        },
      ],
      users: [
        {
          name: 'n',
          certData: Buffer.from(client.certificate).toString('base64'),
          keyData: Buffer.from(client.privateKey).toString('base64'),
        },
      ],
      contexts: [{ name: 'sim', cluster: 'sim', user: 'n' }],
      currentContext: 'sim',
    });
    const kubelet = kc.makeApiClient(CoreV1Api);
    const own = await kubelet.createNode({ body: { metadata: { name: 'self' } } });
    assert.equal(own.metadata?.name, 'self');
    await rejectsWith(kubelet.createNode({ body: { metadata: { name: 'someone-else' } } }), 403, 'Forbidden');
    await kubelet.patchNodeStatus(
      { name: 'self', body: { status: { conditions: [{ type: 'Ready', status: 'True' }] } } },
      setHeaderOptions('Content-Type', PatchStrategy.StrategicMergePatch),
    );
    await rejectsWith(kubelet.deleteNode({ name: 'self' }), 403, 'Forbidden');
  });

  test('allow-all authorizes any authenticated caller, and request logs carry no credentials', async () => {
    const lines: string[] = [];
    const logger = createLogger({
      level: 'debug',
      destination: { write: (line: string) => lines.push(line) },
    });
    const open = await startApiServer({ authorization: 'allow-all', logger });
    try {
      const anyone = open.kubeConfig({ name: 'anyone', groups: [] }).makeApiClient(CoreV1Api);
      await anyone.createNode({ body: { metadata: { name: 'by-anyone' } } });
      assert.equal((await anyone.readNode({ name: 'by-anyone' })).metadata?.name, 'by-anyone');
      const token = /token: (\S+)/.exec(open.kubeconfig({ name: 'anyone', groups: [] }))?.[1] as string;
      const requests = lines.filter((l) => l.includes('apiserver request'));
      assert.ok(
        requests.some((l) => l.includes('"path":"/api/v1/nodes/by-anyone"') && l.includes('"user":"anyone"')),
      );
      assert.ok(lines.every((l) => !l.includes(token)));
    } finally {
      await open.close();
    }
  });

  test('approving needs approve, and signing needs sign, on the signer, besides the subresource', async () => {
    const admin = sim.kubeConfig().makeApiClient(CertificatesV1Api);
    await admin.createCertificateSigningRequest({
      body: {
        metadata: { name: 'csr-signers' },
        spec: {
          request: await csrRequest('someone'),
          signerName: 'example.com/widgets',
          usages: ['digital signature', 'client auth'],
        },
      },
    });
    const carol = sim.kubeConfig({ name: 'carol', groups: [] }).makeApiClient(CertificatesV1Api);
    sim.grant({
      user: 'carol',
      verbs: ['get', 'update'],
      resources: [
        'certificatesigningrequests',
        'certificatesigningrequests/approval',
        'certificatesigningrequests/status',
      ],
    });
    const approve = async () => {
      const csr = await carol.readCertificateSigningRequest({ name: 'csr-signers' });
      const approved = { type: 'Approved', status: 'True', reason: 'Test', message: 'ok' };
      return carol.replaceCertificateSigningRequestApproval({
        name: 'csr-signers',
        body: { ...csr, status: { conditions: [approved] } },
      });
    };
    const denied = await rejectsWith(approve(), 403, 'Forbidden');
    assert.match(
      denied.message,
      /user not permitted to approve requests with signerName "example.com\/widgets"/,
    );
    // As in RBAC, `<domain>/*` names every signer of the domain.
    sim.grant({ user: 'carol', verbs: ['approve'], resources: ['signers'], names: ['example.com/*'] });
    await approve();
    const certificate = Buffer.from((await createCertificateAuthority()).certificate).toString('base64');
    const sign = async () => {
      const csr = await carol.readCertificateSigningRequest({ name: 'csr-signers' });
      return carol.replaceCertificateSigningRequestStatus({
        name: 'csr-signers',
        body: { ...csr, status: { ...csr.status, certificate } },
      });
    };
    const unsigned = await rejectsWith(sign(), 403, 'Forbidden');
    assert.match(
      unsigned.message,
      /user not permitted to sign requests with signerName "example.com\/widgets"/,
    );
    sim.grant({ user: 'carol', verbs: ['sign'], resources: ['signers'], names: ['example.com/widgets'] });
    assert.ok((await sign()).status?.certificate);
  });

  test('answers 401 without credentials and 403 without permission', async () => {
    const anonymous = new KubeConfig();
    anonymous.loadFromClusterAndUser(
      {
        name: 'sim',
        server: sim.url,
        caData: Buffer.from(sim.caCertificate).toString('base64'),
        skipTLSVerify: false,
      },
      { name: 'nobody' },
    );
    const unauthorized = await rejectsWith(
      anonymous.makeApiClient(CoreV1Api).listNode(),
      401,
      'Unauthorized',
    );
    assert.equal(unauthorized.message, 'Unauthorized');
    const bob = sim.kubeConfig({ name: 'bob', groups: [] }).makeApiClient(CoreV1Api);
    const denied = await rejectsWith(bob.readNode({ name: 'patched' }), 403, 'Forbidden');
    assert.equal(
      denied.message,
      'nodes "patched" is forbidden: User "bob" cannot get resource "nodes" in API group "" at the cluster scope',
    );
    sim.grant({ user: 'bob', verbs: ['get'], resources: ['nodes'], names: ['patched'] });
    assert.equal((await bob.readNode({ name: 'patched' })).metadata?.name, 'patched');
    await rejectsWith(bob.readNode({ name: 'w1' }), 403, 'Forbidden');
  });
});
