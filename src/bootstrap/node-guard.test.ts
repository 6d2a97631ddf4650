import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { ConflictError, ForbiddenError, UnavailableError } from '../errors.ts';
import { startApiServer } from '../sim/apiserver/index.ts';
import { kubeletNodeStatus } from '../sim/dev-cluster.ts';
import { assertNodeNotRegistered, httpsNodeReader } from './node-guard.ts';

const sim = await startApiServer();
after(() => sim.close());
sim.store.create({
  apiVersion: 'v1',
  kind: 'Node',
  metadata: { name: 'ready-1' },
  status: kubeletNodeStatus('ready-1', '10.0.0.1'),
});
sim.store.create({ apiVersion: 'v1', kind: 'Node', metadata: { name: 'new-1' }, status: { conditions: [] } });

test('reads Nodes over one pooled connection: absent, not Ready, Ready', async () => {
  const read = httpsNodeReader(sim.kubeConfig());
  assert.equal(await read('never-registered'), undefined);
  await assertNodeNotRegistered(read, 'never-registered');
  await assertNodeNotRegistered(read, 'new-1');
  await assert.rejects(
    assertNodeNotRegistered(read, 'ready-1'),
    (err: unknown) => err instanceof ConflictError && err.details?.['reason'] === 'node-already-registered',
  );
  // Names are path-escaped: a crafted name cannot address another resource.
  assert.equal(await read('../namespaces/kube-system'), undefined);
});

test('a refused or failed read is an error, never "not registered"', async () => {
  const stranger = httpsNodeReader(sim.kubeConfig({ name: 'stranger', groups: [] }));
  await assert.rejects(stranger('ready-1'), ForbiddenError);
  sim.faults.errors({ resource: 'nodes', verbs: ['get'], status: 503, count: 1 });
  await assert.rejects(httpsNodeReader(sim.kubeConfig())('ready-1'), UnavailableError);
});
