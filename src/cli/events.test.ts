/**
 * `kops-controller events` against the simulated API server over real sockets, with its node rules (a
 * kubelet may create and patch Events about any object, but not get or list them): the refusals the
 * real NodeEventRecorder writes verify; Events a compromised node writes in the controller's name do
 * not, and the command says why; the command writes nothing, not even the key it cannot find.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Registry } from 'prom-client';
import { labelsKeySecret, labelsKeySecretName } from '../controllers/node/labels-key.ts';
import { eventName, eventNameKey } from '../controllers/node/node-event.ts';
import { NodeEventRecorder } from '../controllers/node/node-event-recorder.ts';
import { exitCodeOf } from '../errors.ts';
import { type KubeHttps, kubeHttps } from '../kube/kube-https.ts';
import { type KubeObject, type SimApiServer, startApiServer } from '../sim/apiserver/index.ts';
import { runCli, runCliResult } from '../testing/cli.ts';
import type { EventRow, EventsReport } from './events.ts';
import { errorLine } from './main.ts';

const root = mkdtempSync(join(tmpdir(), 'kops-events-cli-'));
after(() => rmSync(root, { recursive: true, force: true }));

const refusal = (instance: string) => `not labelling node: instance ${instance} is tagged for cluster other`;

function nodeObject(name: string, creationTimestamp?: string): KubeObject {
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name, ...(creationTimestamp ? { creationTimestamp } : {}) },
    spec: {},
  } as KubeObject;
}

/** An Event about `node` as a kubelet would send it, "from kops-controller". */
function forgedEvent(
  namespace: string,
  name: string,
  node: string,
  message: string,
  extra: Record<string, unknown> = {},
): string {
  const now = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
  return JSON.stringify({
    apiVersion: 'v1',
    kind: 'Event',
    metadata: { name, namespace },
    involvedObject: { apiVersion: 'v1', kind: 'Node', name: node, uid: node },
    type: 'Warning',
    reason: 'IdentityRejected',
    message,
    source: { component: 'kops-controller' },
    reportingComponent: 'kops-controller',
    firstTimestamp: now,
    lastTimestamp: now,
    count: 1,
    ...extra,
  });
}

describe('kops-controller events', () => {
  let sim: SimApiServer;
  let kubeconfig = '';
  /** The replicas' shared key, as the controller keeps it in kube-system. */
  const key = randomBytes(32);
  /** A compromised node: its kubelet's credentials, under the node rules. */
  let asEvilNode: KubeHttps;
  let recorder: NodeEventRecorder;
  const running = new AbortController();
  const uidOf = (name: string) => sim.store.get('nodes', undefined, name)?.metadata.uid ?? '';
  /** The controller's refusal of `name`, written by the real recorder; its Event's name. */
  const refuse = async (name: string): Promise<string> => {
    const node = { name, uid: uidOf(name) };
    assert.equal(
      await recorder.record(node, 'Warning', 'IdentityRejected', refusal(`i-${name}`), running.signal),
      'created',
    );
    return eventName(node, 'Warning', 'IdentityRejected', refusal(`i-${name}`), eventNameKey(key));
  };
  const events = (...args: string[]) => ['events', ...args, '--kubeconfig', kubeconfig];
  const report = async (...args: string[]) =>
    JSON.parse(await runCli(...events(...args, '-o', 'json'))) as EventsReport;
  const forge = async (namespace: string, body: string) => {
    const answer = await asEvilNode({
      action: 'forge an event',
      method: 'POST',
      path: `/api/v1/namespaces/${namespace}/events`,
      body,
    });
    assert.equal(answer.status, 201, answer.body.toString());
  };

  before(async () => {
    sim = await startApiServer();
    kubeconfig = join(root, 'kubeconfig');
    writeFileSync(kubeconfig, sim.kubeconfig());
    sim.store.create(labelsKeySecret('kube-system', key) as KubeObject);
    for (const name of ['bad-node', 'good-node', 'evil-node', 'copied-node', 'rewritten-node']) {
      sim.store.create(nodeObject(name));
    }
    asEvilNode = kubeHttps(sim.kubeConfig({ name: 'system:node:evil-node', groups: ['system:nodes'] }), {
      timeoutMs: 10_000,
    });
    recorder = new NodeEventRecorder(sim.kubeConfig(), {
      nameKey: () => eventNameKey(key),
      registry: new Registry(),
    });
  });
  after(async () => {
    running.abort();
    await sim.close();
  });

  test('a refusal the real NodeEventRecorder wrote is verified, in a kubectl-style table with a summary', async () => {
    const name = await refuse('bad-node');
    const table = await runCli(...events('--node', 'bad-node'));
    const lines = table.trimEnd().split('\n');
    assert.match(
      lines[0] as string,
      /^EVENT\s+NODE\s+TYPE\s+REASON\s+VERDICT\s+COUNT\s+LAST SEEN\s+MESSAGE$/,
    );
    assert.match(
      lines[1] as string,
      new RegExp(
        `^default/${name.replace('.', '\\.')}\\s+bad-node\\s+Warning\\s+IdentityRejected\\s+verified\\s+1\\s+\\d+m\\s+not labelling node: instance i-bad-node`,
      ),
    );
    assert.equal(
      lines[2],
      "1 Event about Nodes in kops-controller's name: 1 verified (written by the controller), 0 unverified",
    );
    assert.equal(lines.length, 3);
  });

  test("forged Events are unverified, with why: a random name, a genuine Event's name copied with other content or into another namespace, a genuine Event rewritten", async () => {
    // A kubelet cannot read Events, so it cannot find the controller's names: it invents one...
    await forge(
      'default',
      forgedEvent(
        'default',
        'good-node.9c0ffee15badc0de',
        'good-node',
        `${refusal('i-0123456789abcdef0')}\u001b[2K\r verified`,
      ),
    );
    // ... or copies one it learnt elsewhere (a pasted `describe node`), which default already holds:
    // into another namespace, about another Node (other content) or word for word.
    const genuine = await refuse('copied-node');
    const conflict = await asEvilNode({
      action: 'copy an event',
      method: 'POST',
      path: '/api/v1/namespaces/default/events',
      body: forgedEvent('default', genuine, 'good-node', refusal('i-good')),
    });
    assert.equal(conflict.status, 409);
    // A "new" Event (eventTime, no lastTimestamp) about a Node may live in kube-system too.
    const asNewEvent = {
      eventTime: new Date().toISOString().replace(/Z$/, '000Z'),
      reportingInstance: 'kops-controller-abcde',
      action: 'Labelling',
      firstTimestamp: undefined,
      lastTimestamp: undefined,
      count: undefined,
    };
    await forge(
      'kube-public',
      forgedEvent('kube-public', genuine, 'good-node', refusal('i-good'), {
        involvedObject: {
          apiVersion: 'v1',
          kind: 'Node',
          name: 'good-node',
          uid: 'good-node',
          namespace: 'kube-public',
        },
      }),
    );
    await forge(
      'kube-system',
      forgedEvent('kube-system', genuine, 'copied-node', refusal('i-copied-node'), asNewEvent),
    );
    // ... or rewrites a genuine Event whose name it learnt (a kubelet may patch Events).
    const rewritten = await refuse('rewritten-node');
    const patched = await asEvilNode({
      action: 'rewrite an event',
      method: 'PATCH',
      path: `/api/v1/namespaces/default/events/${rewritten}`,
      body: JSON.stringify({ message: 'node is healthy', type: 'Normal', reason: 'Labelled' }),
      contentType: 'application/merge-patch+json',
    });
    assert.equal(patched.status, 200, patched.body.toString());
    // The kubelet's own Events about Nodes are not in the controller's name: not listed.
    await forge(
      'default',
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'Event',
        metadata: { name: 'evil-node.17a0b1c2d3e4f5a6', namespace: 'default' },
        involvedObject: { apiVersion: 'v1', kind: 'Node', name: 'evil-node', uid: 'evil-node' },
        type: 'Normal',
        reason: 'NodeReady',
        message: 'Node evil-node status is now: NodeReady',
        source: { component: 'kubelet', host: 'evil-node' },
      }),
    );

    const verdicts = async (node: string) =>
      (await report('--node', node)).events.map(
        (e) => `${e.namespace}/${e.name} ${e.verdict} ${e.why ?? ''}`,
      );
    assert.deepEqual(await verdicts('good-node'), [
      'default/good-node.9c0ffee15badc0de unverified name-not-keyed',
      `kube-public/${genuine} unverified name-not-keyed`,
    ]);
    assert.deepEqual(await verdicts('copied-node'), [
      `default/${genuine} verified `,
      `kube-system/${genuine} unverified other-namespace`,
    ]);
    assert.deepEqual(await verdicts('rewritten-node'), [`default/${rewritten} unverified name-not-keyed`]);
    assert.deepEqual(await verdicts('evil-node'), []);

    const all = await report();
    const forged = all.events.find((e) => e.name === 'good-node.9c0ffee15badc0de');
    assert.match(forged?.explanation ?? '', /someone other than the controller/);
    assert.match(forged?.explanation ?? '', /before it had read its key/);
    assert.match(all.events.find((e) => e.namespace === 'kube-system')?.explanation ?? '', /only in default/);
    assert.equal(all.events.find((e) => e.namespace === 'kube-system')?.lastSeen, asNewEvent.eventTime);

    const table = await runCli(...events('--node', 'good-node'));
    assert.ok(!table.includes('\u001b'), 'a forged message reaches no terminal escape');
    assert.match(
      table,
      /default\/good-node\.9c0ffee15badc0de\s+good-node\s+Warning\s+IdentityRejected\s+unverified: name-not-keyed\s+1\s/,
    );
    assert.match(
      table,
      /^2 Events about Nodes in kops-controller's name: 0 verified \(written by the controller\), 2 unverified\b/m,
    );
    assert.match(table, /^name-not-keyed \(2\): .*someone other than the controller/m);
  });

  test('a Node re-created under its name makes its old Event unverified as re-created, and a deleted one as node-gone', async () => {
    sim.store.create(nodeObject('recreated-node'));
    sim.store.create(nodeObject('deleted-node'));
    const old = await refuse('recreated-node');
    const gone = await refuse('deleted-node');
    const eventCreated = Date.parse(
      sim.store.get('events', 'default', old)?.metadata.creationTimestamp ?? '',
    );
    const oldUid = uidOf('recreated-node');
    sim.store.delete('nodes', undefined, 'recreated-node');
    sim.store.delete('nodes', undefined, 'deleted-node');
    // The API server stamps the new Node when it is created, after the Event.
    sim.store.create(
      nodeObject('recreated-node', new Date(eventCreated + 60_000).toISOString().replace(/\.\d+Z$/, 'Z')),
    );
    assert.notEqual(uidOf('recreated-node'), oldUid);

    const recreated = (await report('--node', 'recreated-node')).events;
    assert.deepEqual(
      recreated.map((e) => [e.name, e.verdict, e.why]),
      [[old, 'unverified', 'node-recreated']],
    );
    assert.match(recreated[0]?.explanation ?? '', /created after this Event/);
    const deleted = (await report('--node', 'deleted-node')).events;
    assert.deepEqual(
      deleted.map((e) => [e.name, e.verdict, e.why]),
      [[gone, 'unverified', 'node-gone']],
    );
  });

  test('-o json: every Event with its verdict, and a summary', async () => {
    const name = eventName(
      { name: 'bad-node', uid: uidOf('bad-node') },
      'Warning',
      'IdentityRejected',
      refusal('i-bad-node'),
      eventNameKey(key),
    );
    const { events: rows, summary } = await report('--node', 'bad-node');
    assert.equal(rows.length, 1);
    const { firstSeen, lastSeen, ...row } = rows[0] as EventRow;
    assert.deepEqual(row, {
      namespace: 'default',
      name,
      node: 'bad-node',
      type: 'Warning',
      reason: 'IdentityRejected',
      message: refusal('i-bad-node'),
      count: 1,
      verdict: 'verified',
    });
    assert.match(firstSeen ?? '', /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    assert.equal(lastSeen, firstSeen);
    assert.deepEqual(summary, { events: 1, verified: 1, unverified: 0, unverifiedBy: {} });

    const whole = await report();
    assert.equal(whole.summary.events, whole.events.length);
    assert.equal(whole.summary.verified + whole.summary.unverified, whole.summary.events);
    assert.equal(
      Object.values(whole.summary.unverifiedBy).reduce((a, b) => a + b, 0),
      whole.summary.unverified,
    );
  });

  test("--node takes a Node's name: anything else is 65 with one line, before any call", async () => {
    const bad = await runCliResult(...events('--node', 'a,involvedObject.name=b'));
    assert.equal(exitCodeOf(bad.error), 65);
    assert.equal(
      errorLine(bad.error),
      "--node a,involvedObject.name=b: expected a Node's name (a DNS subdomain)",
    );
  });

  test('without the key Secret it exits 66 with one line and creates no key, and an RBAC refusal exits 77', async () => {
    const bare = await startApiServer();
    try {
      const file = join(root, 'bare-kubeconfig');
      writeFileSync(file, bare.kubeconfig());
      const missing = await runCliResult('events', '--kubeconfig', file);
      assert.equal(exitCodeOf(missing.error), 66);
      assert.equal(
        errorLine(missing.error),
        `no key Secret kube-system/${labelsKeySecretName}: the controller has not made its key yet (it does as it first leads), so no Event can be verified; pass --key-namespace if its leaderElection.namespace is not kube-system`,
      );
      assert.equal(bare.store.get('secrets', 'kube-system', labelsKeySecretName), undefined);

      // The deployment's empty Secret: still no key, and it stays empty.
      bare.store.create({
        apiVersion: 'v1',
        kind: 'Secret',
        metadata: { name: labelsKeySecretName, namespace: 'kube-system' },
        type: 'Opaque',
      } as KubeObject);
      const empty = await runCliResult('events', '--kubeconfig', file);
      assert.equal(exitCodeOf(empty.error), 66);
      assert.match(
        errorLine(empty.error),
        /^Secret kube-system\/kops-controller-labels-key holds no key yet/,
      );
      assert.equal(bare.store.get('secrets', 'kube-system', labelsKeySecretName)?.['data'], undefined);

      const viewer = join(root, 'viewer-kubeconfig');
      writeFileSync(viewer, bare.kubeconfig({ name: 'viewer', groups: [] }));
      const refused = await runCliResult('events', '--kubeconfig', viewer);
      assert.equal(exitCodeOf(refused.error), 77);
      assert.match(errorLine(refused.error), /HTTP 403: .*; grant the permission in RBAC$/);
    } finally {
      await bare.close();
    }
  });
});
