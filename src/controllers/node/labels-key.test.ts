import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { kubeHttps } from '../../kube/kube-https.ts';
import { startApiServer } from '../../sim/apiserver/index.ts';
import { labelsKeyField, labelsKeySecretName, loadLabelsKey } from './labels-key.ts';

const sim = await startApiServer();
after(() => sim.close());
const call = kubeHttps(sim.kubeConfig(), { timeoutMs: 5_000 });
const signal = new AbortController().signal;

function emptySecret(namespace: string): void {
  sim.store.create({
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: { name: labelsKeySecretName, namespace },
    type: 'Opaque',
  });
}

for (const name of ['fill', 'race', 'absent', 'short']) {
  sim.store.create({ apiVersion: 'v1', kind: 'Namespace', metadata: { name } });
}

const stored = (namespace: string) => sim.store.get('secrets', namespace, labelsKeySecretName);

test("the deployment's empty Secret is filled in place (no create needed); the next term reads the same key", async () => {
  emptySecret('fill');
  const uid = stored('fill')?.metadata.uid;
  const first = await loadLabelsKey(call, 'fill', signal);
  assert.equal(first.created, true);
  assert.equal(first.key.length, 32);
  assert.equal(stored('fill')?.metadata.uid, uid, 'the same object, updated');
  assert.equal(stored('fill')?.['immutable'], true);
  const again = await loadLabelsKey(call, 'fill', signal);
  assert.deepEqual(again, { key: first.key, created: false });
});

test('two leaders filling the empty Secret at once end with one key: the loser of the write reads the winner’s', async () => {
  emptySecret('race');
  const [a, b] = await Promise.all([
    loadLabelsKey(call, 'race', signal),
    loadLabelsKey(call, 'race', signal),
  ]);
  assert.deepEqual(a.key, b.key);
  assert.equal([a, b].filter((loaded) => loaded.created).length, 1);
  const data = (stored('race')?.['data'] ?? {}) as Record<string, string>;
  assert.deepEqual(Buffer.from(data[labelsKeyField] ?? '', 'base64'), a.key);
});

test('where there is no Secret, one is created; a key too short to trust is refused, not used or replaced', async () => {
  const made = await loadLabelsKey(call, 'absent', signal);
  assert.equal(made.created, true);
  assert.ok(stored('absent'));
  sim.store.create({
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: { name: labelsKeySecretName, namespace: 'short' },
    data: { [labelsKeyField]: Buffer.alloc(8).toString('base64') },
  });
  await assert.rejects(loadLabelsKey(call, 'short', signal), {
    kind: 'invalid',
    message: /at least 32 bytes/,
  });
});
