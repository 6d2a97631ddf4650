import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { describe, test } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import { ConflictError, NotFoundError, UnavailableError } from '../errors.ts';
import { startApiServer } from '../sim/apiserver/index.ts';
import { createCertificateAuthority, issueServingCertificate } from '../sim/tls.ts';
import { type KubeHttps, kubeHttps } from './kube-https.ts';
import { type MapChanges, mapPatch, metadataPatch, patchNode } from './patch.ts';

interface Seen {
  method: string;
  url: string;
  contentType: string | undefined;
  body: unknown;
}

/** A one-route HTTPS server that records each request and answers with `reply`. */
async function recordingServer(reply: (req: IncomingMessage) => { status: number; body: unknown }) {
  const seen: Seen[] = [];
  const ca = await createCertificateAuthority();
  const serving = await issueServingCertificate(ca);
  const server = createServer({ key: serving.privateKey, cert: serving.certificate }, async (req, res) => {
    let text = '';
    for await (const chunk of req) text += chunk;
    seen.push({
      method: req.method ?? '',
      url: req.url ?? '',
      contentType: req.headers['content-type'],
      body: JSON.parse(text),
    });
    const { status, body } = reply(req);
    res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const kc = new KubeConfig();
  kc.loadFromClusterAndUser(
    {
      name: 'c',
      server: `https://127.0.0.1:${(server.address() as AddressInfo).port}`,
      caData: Buffer.from(ca.certificate).toString('base64'),
      skipTLSVerify: false,
    },
    { name: 'u' },
  );
  const call = kubeHttps(kc, { timeoutMs: 5_000 });
  return {
    seen,
    call,
    close: () => {
      server.closeAllConnections();
      return new Promise((r) => server.close(r));
    },
  };
}

describe('patch bodies', () => {
  test('labels to set and to remove become one merge fragment, removals as null', () => {
    assert.deepEqual(mapPatch({ set: { a: '1' }, remove: ['gone'] }), { gone: null, a: '1' });
    assert.deepEqual(metadataPatch({ labels: { set: { k: 'v' }, remove: ['gone'] } }), {
      metadata: { labels: { gone: null, k: 'v' } },
    });
    assert.deepEqual(metadataPatch({ annotations: { remove: ['x'] } }), {
      metadata: { annotations: { x: null } },
    });
  });
});

/** Sets and removes labels of a Node in one strategic-merge patch, as the node controller does. */
const patchLabels = (call: KubeHttps, name: string, labels: MapChanges) =>
  patchNode(call, name, metadataPatch({ labels }), 'strategic-merge');

describe('patch requests', () => {
  test('a label patch is sent as a strategic-merge patch', async () => {
    const server = await recordingServer(() => ({
      status: 200,
      body: { kind: 'Node', metadata: { name: 'n1' } },
    }));
    try {
      const node = await patchLabels(server.call, 'n1', {
        set: { 'kops.k8s.io/instancegroup': 'nodes' },
        remove: ['old'],
      });
      assert.equal(node.metadata?.name, 'n1');
      assert.deepEqual(server.seen, [
        {
          method: 'PATCH',
          url: '/api/v1/nodes/n1?fieldManager=kops-controller',
          contentType: 'application/strategic-merge-patch+json',
          body: { metadata: { labels: { old: null, 'kops.k8s.io/instancegroup': 'nodes' } } },
        },
      ]);
    } finally {
      await server.close();
    }
  });

  test('merge and JSON patches carry their own content types; failures are typed', async () => {
    let status = 200;
    const messages: Record<number, string> = {
      404: 'nodes "n2" not found',
      409: 'the object has been modified',
      503: 'etcd leader changed',
    };
    const server = await recordingServer(() =>
      status === 200
        ? { status, body: { kind: 'Node', metadata: { name: 'n1' } } }
        : { status, body: { kind: 'Status', code: status, message: messages[status] } },
    );
    try {
      await patchNode(server.call, 'n1', { spec: { podCIDR: '10.0.0.0/24' } }, 'merge');
      await patchNode(server.call, 'n1', [{ op: 'test', path: '/metadata/name', value: 'n1' }], 'json');
      assert.deepEqual(
        server.seen.map((s) => s.contentType),
        ['application/merge-patch+json', 'application/json-patch+json'],
      );
      status = 404;
      await assert.rejects(
        patchLabels(server.call, 'n2', { set: { a: 'b' } }),
        (err: unknown) =>
          err instanceof NotFoundError && /patch node n2: HTTP 404: nodes "n2" not found/.test(err.message),
      );
      status = 409;
      await assert.rejects(
        patchLabels(server.call, 'n2', { set: { a: 'b' } }),
        (err: unknown) =>
          err instanceof ConflictError && /HTTP 409: the object has been modified/.test(err.message),
      );
      status = 503;
      await assert.rejects(
        patchLabels(server.call, 'n2', { set: { a: 'b' } }),
        (err: unknown) =>
          err instanceof UnavailableError && /HTTP 503: etcd leader changed/.test(err.message),
      );
    } finally {
      await server.close();
    }
  });
});

describe('patches against the simulated API server', () => {
  test('label patches set and remove labels without touching others', async () => {
    const sim = await startApiServer();
    try {
      const call = kubeHttps(sim.kubeConfig(), { timeoutMs: 5_000 });
      sim.store.create({
        apiVersion: 'v1',
        kind: 'Node',
        metadata: { name: 'n1', labels: { keep: 'me', old: 'x', 'kops.k8s.io/instancegroup': 'a' } },
      });
      const patched = await patchLabels(call, 'n1', {
        set: { 'kops.k8s.io/instancegroup': 'nodes', 'node-role.kubernetes.io/node': '' },
        remove: ['old'],
      });
      assert.deepEqual(patched.metadata?.labels, {
        keep: 'me',
        'kops.k8s.io/instancegroup': 'nodes',
        'node-role.kubernetes.io/node': '',
      });
      // A patch made on a stale resourceVersion (as IPAM sends) is refused, and a deleted Node is gone.
      await assert.rejects(
        patchNode(
          call,
          'n1',
          { metadata: { resourceVersion: '1' }, spec: { podCIDR: '10.0.0.0/24' } },
          'merge',
        ),
        ConflictError,
      );
      await assert.rejects(patchLabels(call, 'gone', { set: { a: 'b' } }), NotFoundError);
    } finally {
      await sim.close();
    }
  });
});
