import assert from 'node:assert/strict';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { after, test } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import { ConflictError, ForbiddenError, UnavailableError } from '../errors.ts';
import { startApiServer } from '../sim/apiserver/index.ts';
import { kubeletNodeStatus } from '../sim/dev-cluster.ts';
import { createCertificateAuthority, issueServingCertificate } from '../sim/tls.ts';
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

test('a pooled connection the server dropped while idle is retried, not reported as an outage', async () => {
  const ca = await createCertificateAuthority();
  const serving = await issueServingCertificate(ca);
  let requests = 0;
  const server = createServer({ key: serving.privateKey, cert: serving.certificate }, (req, res) => {
    requests++;
    // Every second request on a connection finds it gone, as after the server's keep-alive timeout.
    if (requests % 2 === 0) {
      req.socket.destroy();
      return;
    }
    res.writeHead(404, { 'content-type': 'application/json' }).end('{"kind":"Status","code":404}');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const kubeConfig = new KubeConfig();
    kubeConfig.loadFromClusterAndUser(
      {
        name: 'c',
        server: `https://127.0.0.1:${(server.address() as AddressInfo).port}`,
        caData: Buffer.from(ca.certificate).toString('base64'),
        skipTLSVerify: false,
      },
      { name: 'u', token: 't' },
    );
    const read = httpsNodeReader(kubeConfig);
    assert.equal(await read('a'), undefined);
    assert.equal(await read('b'), undefined);
    assert.equal(requests, 3);
  } finally {
    server.closeAllConnections();
    server.close();
  }
});
