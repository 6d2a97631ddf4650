import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1CertificateSigningRequest } from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import { makeClients } from '../kube/client.ts';
import { csrInformer } from '../kube/shared-informer.ts';
import { createCa } from '../pki/ca.ts';
import { parseCsr } from '../pki/csr.ts';
import { buildCsrPem } from '../pki/csr-build.ts';
import { generateKey } from '../pki/keys.ts';
import { issueCertificate } from '../pki/profiles.ts';
import { startApiServer } from '../sim/apiserver/index.ts';
import { entryOfCsr, KubeletRenewalRecorder } from './csr-renewals.ts';
import { epochSeconds, type LedgerEntry, mergeEntries } from './ledger.ts';

const ca = createCa();

function csrWith(signerName: string, node: string, profile: 'kubelet' | 'kubelet-server' = 'kubelet') {
  // As a kubelet asks: its CSR names it system:node:<name> in system:nodes, whichever certificate.
  const request = parseCsr(
    buildCsrPem(generateKey(), {
      subject: { commonName: `system:node:${node}`, organizations: ['system:nodes'] },
      ...(profile === 'kubelet-server' ? { ipAddresses: ['10.0.0.1'] } : {}),
    }),
  );
  const issued = issueCertificate(ca, profile, request, { name: node, ipAddresses: ['10.0.0.1'] });
  const csr: V1CertificateSigningRequest = {
    metadata: { name: `csr-${node}-${profile}` },
    spec: {
      signerName,
      request: Buffer.from(
        buildCsrPem(generateKey(), {
          subject: { commonName: `system:node:${node}`, organizations: ['system:nodes'] },
        }),
      ).toString('base64'),
      usages: ['digital signature', 'client auth'],
    },
    status: { certificate: Buffer.from(issued.pem).toString('base64') },
  };
  return { csr, issued };
}

test('entryOfCsr: a kubelet renewal is the node’s newest certificate of its kind; other CSRs are not', () => {
  const { csr, issued } = csrWith('kubernetes.io/kube-apiserver-client-kubelet', 'node-1');
  assert.deepEqual(entryOfCsr(csr), {
    kind: 'kubelet',
    instanceGroup: '',
    instance: 'node-1',
    serial: issued.serialHex,
    notBefore: epochSeconds(issued.notBefore),
    notAfter: epochSeconds(issued.notAfter),
  });
  assert.equal(
    entryOfCsr(csrWith('kubernetes.io/kubelet-serving', 'node-1', 'kubelet-server').csr)?.kind,
    'kubelet-server',
  );
  assert.equal(entryOfCsr(csrWith('example.com/other', 'node-1').csr), null);
  assert.equal(entryOfCsr({ ...csr, status: {} }), null, 'not issued yet');
  assert.equal(
    entryOfCsr({ ...csr, status: { certificate: 'bm90IGEgY2VydA==' } }),
    null,
    'not a certificate',
  );
});

test('a renewal replaces the joined certificate and keeps the node’s instance group', () => {
  const joined: LedgerEntry = {
    kind: 'kubelet',
    instanceGroup: 'nodes-a',
    instance: 'node-1',
    serial: '01',
    notBefore: 1_000,
    notAfter: 2_000_000_000,
  };
  const renewed = { ...joined, instanceGroup: '', serial: '02', notBefore: 2_000 };
  assert.deepEqual(mergeEntries([joined], [renewed], 5_000).entries, [
    { ...renewed, instanceGroup: 'nodes-a' },
  ]);
  assert.deepEqual(mergeEntries([renewed], [joined], 5_000).entries, [
    { ...renewed, instanceGroup: 'nodes-a' },
  ]);
});

test('the leader records the certificates the kubelet signers issued, as they are issued', async () => {
  const sim = await startApiServer();
  const recorded: LedgerEntry[] = [];
  const stop = new AbortController();
  const running = new KubeletRenewalRecorder({
    kubeConfig: sim.kubeConfig(),
    ledger: { record: (entries) => recorded.push(...entries) },
  }).start(stop.signal);
  try {
    const certificates = makeClients(sim.kubeConfig()).certificates;
    const { csr, issued } = csrWith('kubernetes.io/kube-apiserver-client-kubelet', 'node-2');
    const created = await certificates.createCertificateSigningRequest({ body: { ...csr, status: {} } });
    await certificates.replaceCertificateSigningRequestStatus({
      name: created.metadata?.name as string,
      body: { ...created, status: { ...csr.status } },
    });
    // Bounded by the test timeout: the watch delivers the issued certificate.
    while (recorded.length === 0) await new Promise((resolve) => setTimeout(resolve, 20));
    assert.deepEqual(
      recorded.map((e) => [e.kind, e.instance, e.serial]),
      [['kubelet', 'node-2', issued.serialHex]],
    );
  } finally {
    stop.abort();
    await running;
    await sim.close();
  }
});

test("a new leadership term over the process's CSR watch records what the cache holds, without listing again", async () => {
  const sim = await startApiServer();
  const kubeConfig = sim.kubeConfig();
  const registry = new Registry();
  const csrs = csrInformer(kubeConfig, { registry });
  const recorded: LedgerEntry[] = [];
  const recorder = new KubeletRenewalRecorder({
    kubeConfig,
    csrs,
    ledger: { record: (entries) => recorded.push(...entries) },
  });
  csrs.start(); // as `run` holds it for the process
  try {
    const certificates = makeClients(kubeConfig).certificates;
    const { csr, issued } = csrWith('kubernetes.io/kubelet-serving', 'node-3');
    const created = await certificates.createCertificateSigningRequest({ body: { ...csr, status: {} } });
    await certificates.replaceCertificateSigningRequestStatus({
      name: created.metadata?.name as string,
      body: { ...created, status: { ...csr.status } },
    });
    const term = async (until: () => boolean) => {
      const leading = new AbortController();
      const running = recorder.start(leading.signal);
      while (!until()) await new Promise((resolve) => setTimeout(resolve, 20));
      leading.abort();
      await running;
    };
    await term(() => recorded.length > 0);
    recorded.length = 0;
    await term(() => true); // the cached renewal is replayed as the term starts
    assert.deepEqual(
      recorded.map((e) => [e.kind, e.instance, e.serial]),
      [['kubelet-server', 'node-3', issued.serialHex]],
    );
    assert.match(
      await registry.metrics(),
      /^informer_lists_total\{resource="certificatesigningrequests",result="success"\} 1$/m,
    );
  } finally {
    await csrs.stop();
    await sim.close();
  }
});
