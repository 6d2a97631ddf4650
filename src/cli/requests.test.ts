import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { httpsNodeReader } from '../bootstrap/node-guard.ts';
import { bootstrapSignerName, queuedCsrObject, sealKeyOf } from '../bootstrap/queue.ts';
import { queueSigner } from '../bootstrap/queue-signer.ts';
import type { BootstrapRequest } from '../bootstrap/types.ts';
import { ConflictError, exitCodeOf, InvalidInputError } from '../errors.ts';
import { makeClients } from '../kube/client.ts';
import { type CertificateAuthority, createCa } from '../pki/ca.ts';
import { parseCsr } from '../pki/csr.ts';
import { buildCsrPem } from '../pki/csr-build.ts';
import { generateKey } from '../pki/keys.ts';
import { type SimApiServer, startApiServer } from '../sim/apiserver/index.ts';
import { runCli } from '../testing/cli.ts';
import { opensslVerify } from '../testing/openssl.ts';
import { errorLine } from './main.ts';

const root = mkdtempSync(join(tmpdir(), 'kops-requests-cli-'));
after(() => rmSync(root, { recursive: true, force: true }));

function queuedRequest(node: string, serving = false): BootstrapRequest {
  const subject = { commonName: `system:node:${node}`, organizations: ['system:nodes'] };
  return {
    id: `id-${node}`,
    body: Buffer.from('{}'),
    claimedNodeName: node,
    certificates: {
      kubelet: parseCsr(buildCsrPem(generateKey(), { subject })),
      ...(serving ? { 'kubelet-server': parseCsr(buildCsrPem(generateKey(), { subject })) } : {}),
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

  /** Facts a policy verified (as metal's inventory does), with the addresses the serving certificate gets. */
  const verifiedFacts = {
    nodeName: 'node-3',
    instanceGroup: 'nodes',
    dnsNames: ['node-3.internal'],
    ipAddresses: ['10.0.0.13', '2001:db8::13'],
    evidence: { providerID: 'metal://node-3', peer: '10.0.0.13', verified: 'true' },
  };

  before(async () => {
    sim = await startApiServer();
    // The controller's identity may sign for the bootstrap signer, as deploy/kubernetes grants it.
    sim.grant({
      user: 'kops-controller',
      verbs: ['sign'],
      resources: ['signers'],
      names: [bootstrapSignerName],
    });
    ca = createCa();
    kubeconfig = join(root, 'kubeconfig');
    writeFileSync(kubeconfig, sim.kubeconfig());
    const verified = queuedCsrObject(queuedRequest('node-3', true), verifiedFacts, sealKeyOf(ca));
    names['node-3'] = verified.metadata?.name as string;
    sim.store.create(verified as never, {
      target: 'main',
      requester: { name: 'kops-controller', groups: [] },
    });
    // A node may create CSRs for any signer: it names ours and writes evidence that looks verified.
    const forged = queuedCsrObject(
      queuedRequest('node-f', true),
      { ...verifiedFacts, nodeName: 'node-f', dnsNames: ['node-f.internal'], ipAddresses: ['10.0.0.66'] },
      sealKeyOf(createCa()),
    );
    names['node-f'] = forged.metadata?.name as string;
    sim.store.create(forged as never, {
      target: 'main',
      requester: { name: 'system:node:evil', groups: ['system:nodes'] },
    });
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
      ['node-3', true, '10.0.0.9', 'Pending'],
      ['node-f', false, '10.0.0.9', 'Pending'],
    ]);
    const table = await requests('list');
    assert.match(table, /^NAME\s+NODE\s+VERIFIED\s+FROM\s+PROOF\s+SANS\s+STATUS\n/);
    assert.match(table, /node-1\s+NO \(claimed\)\s+10\.0\.0\.9\s+none\s+Pending/);
  });

  test('list and show print the requested identity and every SAN of every certificate', async () => {
    const rows = JSON.parse(await requests('list', '-o', 'json')) as {
      node: string;
      sans: string[];
      certificates: { profile: string; subject: string; dnsNames: string[]; ipAddresses: string[] }[];
    }[];
    const row = rows.find((r) => r.node === 'node-3');
    assert.deepEqual(row?.sans, ['node-3.internal', '10.0.0.13', '2001:db8::13']);
    assert.deepEqual(row?.certificates, [
      {
        profile: 'kubelet',
        usage: 'client',
        subject: 'O=system:nodes, CN=system:node:node-3',
        dnsNames: [],
        ipAddresses: [],
      },
      {
        profile: 'kubelet-server',
        usage: 'server',
        subject: 'O=system:nodes, CN=system:node:node-3',
        dnsNames: ['node-3.internal'],
        ipAddresses: ['10.0.0.13', '2001:db8::13'],
      },
    ]);
    const table = await requests('list');
    assert.match(
      table,
      /node-3\s+yes\s+10\.0\.0\.9\s+none\s+node-3\.internal,10\.0\.0\.13,2001:db8::13\s+Pending/,
    );
    const shown = await requests('show', names['node-3'] as string);
    assert.match(shown, /^node:\s+node-3 \(verified by the approval policy\)$/m);
    assert.match(shown, /^addresses:\s+verified by the approval policy$/m);
    assert.match(shown, /^created by:\s+kops-controller \(may sign for kops\.k8s\.io\/node-bootstrap\)$/m);
    assert.match(
      shown,
      /^ {2}kubelet: client certificate O=system:nodes, CN=system:node:node-3\n {4}no subjectAltName$/m,
    );
    assert.match(
      shown,
      /^ {2}kubelet-server: serving certificate O=system:nodes, CN=system:node:node-3\n {4}DNS node-3\.internal\n {4}IP 10\.0\.0\.13\n {4}IP 2001:db8::13$/m,
    );
    assert.match(shown, /^evidence:\s+peer=10\.0\.0\.13, providerID=metal:\/\/node-3, verified=true$/m);
    const json = JSON.parse(await requests('show', names['node-3'] as string, '-o', 'json')) as {
      sans: string[];
    };
    assert.deepEqual(json.sans, row?.sans);
  });

  test('evidence the server did not verify is never shown as verified, whatever the CSR claims', async () => {
    const rows = JSON.parse(await requests('list', '-o', 'json')) as {
      node: string;
      verified: boolean;
      verification: string;
    }[];
    const forged = rows.find((r) => r.node === 'node-f');
    assert.equal(forged?.verified, false);
    assert.match(forged?.verification ?? '', /NOT created by kops-controller: by system:node:evil/);
    const claimed = rows.find((r) => r.node === 'node-1');
    assert.equal(claimed?.verified, false);
    assert.match(claimed?.verification ?? '', /claimed by the requester/);
    const table = await requests('list');
    assert.match(table, /node-f\s+NO \(not made by kops-controller\)\s+/);
    const shown = await requests('show', names['node-f'] as string);
    assert.match(
      shown,
      /^created by:\s+system:node:evil \(NOT kops-controller: it may not sign for kops\.k8s\.io\/node-bootstrap; trust nothing this request says\)$/m,
    );
    assert.match(shown, /^node:\s+node-f \(NOT verified\)$/m);
    assert.match(shown, /^addresses:\s+NOT verified \(requested\)$/m);
    // Its names are still listed, so that the admin sees what it asks for.
    assert.match(shown, /^ {4}DNS node-f\.internal$/m);
  });

  test('an admin who may not ask who created a request sees nothing as verified, and why', async () => {
    sim.grant({ user: 'viewer', verbs: ['get', 'list'], resources: ['certificatesigningrequests'] });
    const viewerConfig = join(root, 'viewer-kubeconfig');
    writeFileSync(viewerConfig, sim.kubeconfig({ name: 'viewer', groups: [] }));
    const rows = JSON.parse(await runCli('requests', 'list', '-o', 'json', '--kubeconfig', viewerConfig)) as {
      node: string;
      verified: boolean;
      verification: string;
    }[];
    const verified = rows.find((r) => r.node === 'node-3');
    assert.equal(verified?.verified, false);
    assert.match(verified?.verification ?? '', /cannot check who created it \(.*subjectaccessreviews/);
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
      assert.deepEqual(
        all
          .filter((r) => r.node === 'node-1' || r.node === 'node-2')
          .map((r) => [r.node, r.status])
          .sort(),
        [
          ['node-1', 'Issued'],
          ['node-2', 'Denied'],
        ],
      );
    } finally {
      stop.abort();
      await running;
    }
  });

  test('a decided request cannot be decided again; other signers are left to kubectl', async () => {
    await assert.rejects(requests('approve', names['node-2'] as string), ConflictError);
    await assert.rejects(requests('approve', 'someone-else'), InvalidInputError);
  });

  test('an unknown request is one short line naming it, exit 66, for every verb', async () => {
    for (const verb of ['approve', 'deny', 'show']) {
      await assert.rejects(requests(verb, 'no-such-request'), (err) => {
        assert.equal(exitCodeOf(err), 66);
        assert.equal(
          errorLine(err),
          'no bootstrap request no-such-request: `kops-controller requests list` shows them',
        );
        return true;
      });
    }
  });
});
