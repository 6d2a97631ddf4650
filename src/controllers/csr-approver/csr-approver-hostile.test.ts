/**
 * The kubelet CSR approver against an API server whose CertificateSigningRequests are malformed, over
 * real HTTP on loopback (src/testing/hostile-apiserver.ts). What must hold: nothing malformed is ever
 * approved (nor denied on the strength of a field it could not read), and the CSR written is the one
 * assessed.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { V1CertificateSigningRequest } from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import type { NodeIdentifier } from '../../cloud/types.ts';
import { csrInformer } from '../../kube/shared-informer.ts';
import { buildCsrPem } from '../../pki/csr-build.ts';
import { generateKey } from '../../pki/keys.ts';
import { answer, eventually, hostileApiServer, startStream } from '../../testing/hostile-apiserver.ts';
import { capturedLogger } from '../../testing/log-capture.ts';
import { kubeletClientSigner } from './checks.ts';
import { CsrApprover } from './csr-approver.ts';

const csrPath = '/apis/certificates.k8s.io/v1/certificatesigningrequests';
/** One key for every request: generating one per CSR would cost seconds. */
const key = generateKey();

/** A CSR as sent: any field may be spoilt. */
interface WireCsr {
  apiVersion: string;
  kind: string;
  metadata: Record<string, unknown>;
  spec: Record<string, unknown> | null;
  status: unknown;
}

/** Its spec and status, to spoil. */
const spec = (c: WireCsr) => c.spec as Record<string, unknown>;
const status = (c: WireCsr) => c.status as Record<string, unknown>;

/** A well-formed client renewal of node `node`, named `name`. */
function renewal(name: string, node: string): WireCsr {
  const request = buildCsrPem(key, {
    subject: { commonName: `system:node:${node}`, organizations: ['system:nodes'] },
  });
  return {
    apiVersion: 'certificates.k8s.io/v1',
    kind: 'CertificateSigningRequest',
    metadata: { name, uid: `uid-${name}`, resourceVersion: '1' },
    spec: {
      request: Buffer.from(request).toString('base64'),
      signerName: kubeletClientSigner,
      username: `system:node:${node}`,
      groups: ['system:nodes', 'system:authenticated'],
      usages: ['digital signature', 'client auth'],
    },
    status: {},
  };
}

/** Every node runs, and is its own instance. */
const identifier: NodeIdentifier = {
  identify: async (ids) =>
    new Map(
      ids.map((id) => [
        id,
        {
          ok: true,
          identity: {
            providerID: id,
            instanceId: id.replace('aws:///z/', ''),
            instanceGroup: 'nodes',
            state: 'running',
            addresses: [],
          },
        },
      ]),
    ),
};

/**
 * Runs the approver against a server that lists `listed` and answers the approver's fresh read of a
 * CSR with `fresh(name)` (default: as listed); returns the decisions written, by CSR name.
 */
async function decisions(
  listed: WireCsr[],
  fresh: (name: string) => unknown = (name) => listed.find((c) => c.metadata['name'] === name),
  until: (written: Map<string, string>) => boolean = (w) => w.has('good'),
) {
  const written = new Map<string, string>();
  const bodies = new Map<string, V1CertificateSigningRequest>();
  const api = await hostileApiServer((req, res) => {
    if (req.path === csrPath) {
      if (req.watch) return startStream(res);
      return answer(res, 200, {
        kind: 'CertificateSigningRequestList',
        metadata: { resourceVersion: '1' },
        items: listed,
      });
    }
    const approval =
      /^\/apis\/certificates\.k8s\.io\/v1\/certificatesigningrequests\/([^/]+)\/approval$/.exec(req.path);
    if (approval && req.method === 'PUT') {
      const body = JSON.parse(req.body) as V1CertificateSigningRequest;
      const condition = body.status?.conditions?.at(-1);
      written.set(decodeURIComponent(approval[1] as string), `${condition?.type} ${condition?.reason}`);
      bodies.set(decodeURIComponent(approval[1] as string), body);
      return answer(res, 200, body);
    }
    const read = /^\/apis\/certificates\.k8s\.io\/v1\/certificatesigningrequests\/([^/]+)$/.exec(req.path);
    if (read) {
      const object = fresh(decodeURIComponent(read[1] as string));
      return object === undefined
        ? answer(res, 404, { kind: 'Status', code: 404 })
        : answer(res, 200, object);
    }
    const node = /^\/api\/v1\/nodes\/([^/]+)$/.exec(req.path);
    if (node)
      return answer(res, 200, { metadata: { name: node[1] }, spec: { providerID: `aws:///z/${node[1]}` } });
    answer(res, 404, { kind: 'Status', code: 404 });
  });
  const { logger, lines } = capturedLogger();
  const csrs = csrInformer(api.kubeConfig, { logger });
  const approver = new CsrApprover({
    kubeConfig: api.kubeConfig,
    csrs,
    identifier,
    registry: new Registry(),
    logger,
    concurrency: 16,
  });
  const stop = new AbortController();
  const running = approver.start(stop.signal);
  try {
    await eventually(() => until(written), 'the well-formed request to be decided');
    // Time for every other request to be looked at (each is one reconcile of a cached record).
    await new Promise((resolve) => setTimeout(resolve, 300));
  } finally {
    stop.abort();
    await running;
    await csrs.close();
    await api.close();
  }
  return { written, bodies, lines };
}

describe('CSR approver against a hostile API server', () => {
  test('a CSR whose fields have the wrong JSON types is neither approved nor denied: skipped with a logged reason', async () => {
    const malformed: [string, (csr: WireCsr) => void][] = [
      ['groups-string', (c) => (spec(c)['groups'] = 'system:nodes')],
      ['groups-substring', (c) => (spec(c)['groups'] = 'not-system:nodes-at-all')],
      ['groups-number', (c) => (spec(c)['groups'] = [7, 'system:nodes'])],
      ['usages-string', (c) => (spec(c)['usages'] = 'client auth')],
      ['username-number', (c) => (spec(c)['username'] = 5)],
      ['signer-object', (c) => (spec(c)['signerName'] = { name: kubeletClientSigner })],
      ['request-number', (c) => (spec(c)['request'] = 12345)],
      ['conditions-object', (c) => (status(c)['conditions'] = { type: 'Denied' })],
      ['condition-null', (c) => (status(c)['conditions'] = [null])],
      ['condition-without-type', (c) => (status(c)['conditions'] = [{ status: 'True', reason: 'Odd' }])],
      ['status-string', (c) => (c.status = 'Denied')],
      ['spec-null', (c) => (c.spec = null)],
      ['expiration-string', (c) => (spec(c)['expirationSeconds'] = '3600')],
    ];
    const listed = malformed.map(([name, spoil], i) => {
      const csr = renewal(name, `n${i}`);
      spoil(csr);
      return csr;
    });
    listed.push(renewal('good', 'ngood'));
    const { written, lines } = await decisions(listed);
    assert.deepEqual(
      [...written],
      [['good', 'Approved AutoApproved']],
      'only the well-formed request was decided',
    );
    for (const [name] of malformed) {
      assert.ok(
        lines.some((l) => l.includes(`"object":"${name}"`) && /cannot transform object; skipped/.test(l)),
        `${name} is skipped with a logged reason`,
      );
    }
  });

  test('the CSR written is the one assessed: a fresh read whose signer, requester, groups or usages differ is not approved', async () => {
    const changed: [string, (csr: WireCsr) => void][] = [
      ['other-signer', (c) => (spec(c)['signerName'] = 'kubernetes.io/kube-apiserver-client')],
      ['other-requester', (c) => (spec(c)['username'] = 'system:node:intruder')],
      ['other-groups', (c) => (spec(c)['groups'] = ['system:authenticated'])],
      ['other-usages', (c) => (spec(c)['usages'] = ['digital signature', 'client auth', 'server auth'])],
      ['conditions-malformed', (c) => (status(c)['conditions'] = { type: 'Denied' })],
      ['condition-without-type', (c) => (status(c)['conditions'] = [{ status: 'True' }])],
    ];
    const listed = changed.map(([name], i) => renewal(name, `n${i}`));
    listed.push(renewal('good', 'ngood'));
    const { written } = await decisions(listed, (name) => {
      const csr = structuredClone(listed.find((c) => c.metadata['name'] === name));
      if (csr) changed.find(([n]) => n === name)?.[1](csr);
      return csr;
    });
    assert.deepEqual([...written], [['good', 'Approved AutoApproved']]);
  });

  test('a request that is not a certificate request (bad base64, not PEM, empty) is denied InvalidRequest, as documented', async () => {
    const bad = ['!!!not base64!!!', Buffer.from('hello').toString('base64'), ''];
    const listed = bad.map((request, i) => {
      const csr = renewal(`bad-${i}`, `n${i}`);
      spec(csr)['request'] = request;
      return csr;
    });
    listed.push(renewal('good', 'ngood'));
    const { written } = await decisions(listed, undefined, (w) => w.size === listed.length);
    assert.deepEqual([...written].sort(), [
      ['bad-0', 'Denied InvalidRequest'],
      ['bad-1', 'Denied InvalidRequest'],
      ['bad-2', 'Denied InvalidRequest'],
      ['good', 'Approved AutoApproved'],
    ]);
  });
});
