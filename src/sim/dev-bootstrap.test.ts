import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CertificatesV1Api } from '@kubernetes/client-node';
import { bootstrapSignerName } from '../bootstrap/queue.ts';
import { controllerBannerLines, startDevController } from '../cli/dev-controller.ts';
import { startDevCluster } from './dev-cluster.ts';
import { devBanner } from './dev-run.ts';
import { startJoiningNodes } from './joining-nodes.ts';

const dir = await mkdtemp(join(tmpdir(), 'dev-bootstrap-'));
const cluster = await startDevCluster({ stateDir: dir, awsThrottling: false });
const controller = await startDevController(cluster, { bootstrapPolicy: 'queue' });

after(async () => {
  await controller.stop();
  await cluster.close();
  await rm(dir, { recursive: true, force: true });
});

test('dev --policy queue: the banner shows discovery and the pin; a node waits until an admin approves', async () => {
  const bootstrap = controller.bootstrap;
  assert.ok(bootstrap);
  const banner = devBanner(cluster, controllerBannerLines(controller));
  assert.match(banner, new RegExp(`Discovery +${bootstrap.url}/cluster-info`));
  assert.match(banner, new RegExp(`CA pin +${bootstrap.caPin}`));
  const joining = startJoiningNodes({
    cluster,
    server: bootstrap.url,
    caPin: bootstrap.caPin,
    count: 1,
    proof: 'none',
    dir: join(dir, 'nodes'),
  });
  const certificates = cluster.api.server.kubeConfig().makeApiClient(CertificatesV1Api);
  let name: string | undefined;
  for (let i = 0; i < 1000 && !name; i++) {
    const list = await certificates.listCertificateSigningRequest();
    name = list.items.find((csr) => csr.spec.signerName === bootstrapSignerName)?.metadata?.name;
    if (!name) await new Promise((resolve) => setTimeout(resolve, 20));
  }
  assert.ok(name, 'the request is queued as a CSR');
  assert.equal(joining.status().joined, 0);
  const csr = await certificates.readCertificateSigningRequest({ name });
  const approved = { type: 'Approved', status: 'True', reason: 'AdminApproved', message: 'test' };
  await certificates.replaceCertificateSigningRequestApproval({
    name,
    body: { ...csr, status: { ...csr.status, conditions: [approved] } },
  });
  await joining.done;
  assert.deepEqual(joining.status(), { total: 1, joined: 1, waiting: 0, failed: 0 });
  assert.ok(cluster.api.server.store.get('nodes', undefined, joining.nodes[0] as string));
});
