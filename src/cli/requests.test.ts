import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { httpsNodeReader } from '../bootstrap/node-guard.ts';
import { queuedCsrObject, sealKeyOf } from '../bootstrap/queue.ts';
import { queueSigner } from '../bootstrap/queue-signer.ts';
import type { BootstrapRequest } from '../bootstrap/types.ts';
import { ConflictError, InvalidInputError } from '../errors.ts';
import { makeClients } from '../kube/client.ts';
import { type CertificateAuthority, createCa } from '../pki/ca.ts';
import { parseCsr } from '../pki/csr.ts';
import { buildCsrPem } from '../pki/csr-build.ts';
import { generateKey } from '../pki/keys.ts';
import { type SimApiServer, startApiServer } from '../sim/apiserver/index.ts';
import { runCli } from '../testing/cli.ts';
import { opensslVerify } from '../testing/openssl.ts';

const root = mkdtempSync(join(tmpdir(), 'kops-requests-cli-'));
after(() => rmSync(root, { recursive: true, force: true }));

function queuedRequest(node: string): BootstrapRequest {
  return {
    id: `id-${node}`,
    body: Buffer.from('{}'),
    claimedNodeName: node,
    certificates: {
      kubelet: parseCsr(
        buildCsrPem(generateKey(), {
          subject: { commonName: `system:node:${node}`, organizations: ['system:nodes'] },
        }),
      ),
    },
    proof: { kind: 'none' },
    remoteAddress: '10.0.0.9',
    receivedAt: new Date(),
  };
}

describe('kops-controller requests', () => {
  let sim: SimApiServer;
  let ca: CertificateAuthority;
  let kubeconfig = '';
  const names: Record<string, string> = {};

  before(async () => {
    sim = await startApiServer();
    ca = createCa();
    kubeconfig = join(root, 'kubeconfig');
    writeFileSync(kubeconfig, sim.kubeconfig());
    for (const node of ['node-1', 'node-2']) {
      const object = queuedCsrObject(
        queuedRequest(node),
        { nodeName: node, dnsNames: [], ipAddresses: [], evidence: { verified: 'false' } },
        sealKeyOf(ca),
      );
      names[node] = object.metadata?.name as string;
      sim.store.create(object as never, {
        target: 'main',
        requester: { name: 'kops-controller', groups: [] },
      });
    }
    sim.store.create({
      apiVersion: 'certificates.k8s.io/v1',
      kind: 'CertificateSigningRequest',
      metadata: { name: 'someone-else' },
      spec: {
        request: Buffer.from(
          buildCsrPem(generateKey(), {
            subject: { commonName: 'system:node:x', organizations: ['system:nodes'] },
          }),
        ).toString('base64'),
        signerName: 'kubernetes.io/kube-apiserver-client-kubelet',
        usages: ['digital signature', 'client auth'],
      },
    });
  });
  after(() => sim.close());

  function requests(...args: string[]): Promise<string> {
    return runCli('requests', ...args, '--kubeconfig', kubeconfig);
  }

  test('list shows the pending bootstrap requests and their evidence, and nothing else', async () => {
    const rows = JSON.parse(await requests('list', '-o', 'json')) as {
      name: string;
      node: string;
      verified: boolean;
      remoteAddress: string;
      status: string;
    }[];
    assert.deepEqual(rows.map((r) => [r.node, r.verified, r.remoteAddress, r.status]).sort(), [
      ['node-1', false, '10.0.0.9', 'Pending'],
      ['node-2', false, '10.0.0.9', 'Pending'],
    ]);
    const table = await requests('list');
    assert.match(table, /^NAME\s+NODE\s+VERIFIED\s+FROM\s+PROOF\s+ADDRESSES\s+STATUS\n/);
    assert.match(table, /node-1\s+NO \(claimed\)\s+10\.0\.0\.9\s+none\s+Pending/);
  });

  test('approve records the decision and the signer issues; deny records the reason', async () => {
    const certificates = makeClients(sim.kubeConfig()).certificates;
    const stop = new AbortController();
    const signer = queueSigner({
      kubeConfig: sim.kubeConfig(),
      certificates,
      ca,
      readNode: httpsNodeReader(sim.kubeConfig()),
    });
    const running = signer.start(stop.signal);
    try {
      assert.equal(
        await requests('approve', names['node-1'] as string),
        `certificatesigningrequest/${names['node-1']} approved\n`,
      );
      await requests('deny', names['node-2'] as string, '--reason', 'not one of ours');
      let certificate: string | undefined;
      for (let i = 0; i < 200 && !certificate; i++) {
        const csr = sim.store.get('certificatesigningrequests', undefined, names['node-1'] as string);
        certificate = (csr?.['status'] as { certificate?: string } | undefined)?.certificate;
        if (!certificate) await new Promise((resolve) => setTimeout(resolve, 25));
      }
      assert.ok(certificate, 'the signer issued the approved request');
      assert.match(
        opensslVerify(ca.signer.certificate.pem, Buffer.from(certificate, 'base64').toString()),
        /: OK$/,
      );
      const denied = sim.store.get('certificatesigningrequests', undefined, names['node-2'] as string);
      const conditions =
        (denied?.['status'] as { conditions?: { type: string; message: string }[] } | undefined)
          ?.conditions ?? [];
      assert.deepEqual(
        conditions.map((c) => [c.type, c.message]),
        [['Denied', 'not one of ours']],
      );
      const all = JSON.parse(await requests('list', '--all', '-o', 'json')) as {
        node: string;
        status: string;
      }[];
      assert.deepEqual(all.map((r) => [r.node, r.status]).sort(), [
        ['node-1', 'Issued'],
        ['node-2', 'Denied'],
      ]);
    } finally {
      stop.abort();
      await running;
    }
  });

  test('a decided request cannot be decided again; other signers are left to kubectl', async () => {
    await assert.rejects(requests('approve', names['node-2'] as string), ConflictError);
    await assert.rejects(requests('approve', 'someone-else'), InvalidInputError);
  });
});
