/**
 * Only the image swapped: the controller under kops' own RBAC. A kops user who keeps kops' addon (its
 * DaemonSet, ServiceAccount and roles, `kops-controller.addons.k8s.io/k8s-1.16.yaml.template`) and
 * only points it at this image gets what the Go controller does — leadership, node labels, nodeup's
 * certificates — and the features that need rules kops does not grant are off, each named in the
 * log, while the process stays up and ready. docs/deploy.md "Only the image swapped" lists them.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { CoreV1Api } from '@kubernetes/client-node';
import { signAwsStsProof } from '../src/agent/aws-proof.ts';
import { type DevController, startDevController } from '../src/cli/dev-controller.ts';
import { createLogger } from '../src/log.ts';
import { managedLabelsSignatureAnnotation } from '../src/nodelabels/signed-managed-labels.ts';
import type { GrantRule } from '../src/sim/apiserver/auth.ts';
import { type DevCluster, startDevCluster } from '../src/sim/dev-cluster.ts';
import { leaseHolder } from '../src/testing/leadership.ts';
import { capturedLogger } from '../src/testing/log-capture.ts';
import { nodeupBody, postNodeup } from '../src/testing/nodeup.ts';

const user = 'system:serviceaccount:kube-system:kops-controller';

/** kops' ClusterRole and its Role in kube-system (kops at 268927e), as grants. */
const kopsRules: GrantRule[] = [
  { user, verbs: ['get', 'list', 'watch', 'patch'], resources: ['nodes'] },
  { user, verbs: ['get', 'list', 'watch', 'create'], resources: ['events'], namespace: 'kube-system' },
  {
    user,
    verbs: ['get', 'list', 'watch', 'patch', 'update', 'delete'],
    resources: ['configmaps', 'leases'],
    namespace: 'kube-system',
    names: ['kops-controller-leader'],
  },
  { user, verbs: ['create'], resources: ['configmaps', 'leases'], namespace: 'kube-system' },
];

/**
 * What the controller asks for and kops' roles refuse, by the feature that is then off (the paths
 * without their query). Anything else refused is a regression: something kops' controller does
 * that this one would no longer do.
 */
const offWithoutOurRules: Record<string, RegExp> = {
  'label pruning (the key Secret)':
    /^\/api\/v1\/namespaces\/kube-system\/secrets\/kops-controller-labels-key$/,
  // The cluster-info publisher signs the document for each token: it stops at the list, before kube-public.
  'bootstrap tokens, their cleaner, cluster-info': /^\/api\/v1\/namespaces\/kube-system\/secrets$/,
  'CSR approver, queue signer': /^\/apis\/certificates\.k8s\.io\/v1\/certificatesigningrequests$/,
  'every kops_* gauge (counted from the pods too)': /^\/api\/v1\/pods$/,
  'kops_component_* gauges': /^\/api\/v1\/componentstatuses$/,
  'certificate expiry ledger':
    /^\/api\/v1\/namespaces\/kube-system\/configmaps(\/kops-controller-certificate-ledger-[0-9a-f]{2})?$/,
};

describe("only the image swapped: the controller under kops' own RBAC", () => {
  let dir: string;
  let cluster: DevCluster;
  let controller: DevController;
  const refused = new Set<string>();
  const { logger, lines } = capturedLogger({ level: 'warn' });

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'kops-rbac-'));
    cluster = await startDevCluster({
      stateDir: dir,
      awsThrottling: false,
      logger: createLogger({
        level: 'debug',
        destination: {
          write(line: string) {
            const record = JSON.parse(line) as { msg?: string; code?: number; user?: string; path?: string };
            if (record.msg === 'apiserver request' && record.code === 403 && record.user === user) {
              refused.add((record.path ?? '').replace(/\?.*/, ''));
            }
          },
        },
      }),
    });
    for (const rule of kopsRules) cluster.api.server.grant(rule);
    const asController = cluster.api.server.kubeConfig({
      name: user,
      groups: ['system:serviceaccounts', 'system:serviceaccounts:kube-system'],
    });
    controller = await startDevController(cluster, {
      bootstrapPolicy: 'aws',
      kubeConfig: asController,
      logger,
    });
  });
  after(async () => {
    await controller.stop();
    await cluster.close();
    await rm(dir, { recursive: true, force: true });
  });

  async function until(what: string, check: () => Promise<boolean>): Promise<void> {
    for (let i = 0; i < 750; i++) {
      if (await check()) return;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    assert.fail(`${what} never happened; refused: ${[...refused].join(', ')}`);
  }

  test('it leads and labels every node, as kops does; it prunes nothing, so it signs nothing', async () => {
    const admin = cluster.api.server.kubeConfig();
    await until('the lease is held', async () => (await leaseHolder(admin)) !== undefined);
    const core = admin.makeApiClient(CoreV1Api);
    await until('every node is labelled from its instance group', async () =>
      (await core.listNode()).items.every((n) => n.metadata?.labels?.['kops.k8s.io/instancegroup']),
    );
    const nodes = (await core.listNode()).items;
    assert.ok(nodes.length > 0);
    assert.ok(nodes.every((n) => !n.metadata?.annotations?.[managedLabelsSignatureAnnotation]));
  });

  test("nodeup's /bootstrap gets its kubelet certificate through the aws policy", async () => {
    const instance = 'i-0feedfacecafe0001';
    cluster.aws.ec2.addInstances([
      {
        id: instance,
        zone: `${cluster.region}a`,
        cluster: cluster.clusterName,
        instanceGroup: 'nodes-us-test-1a',
        privateIp: '10.9.9.9',
      },
    ]);
    const session = cluster.aws.sts.addInstanceProfileSession(`nodes.${cluster.clusterName}`, instance);
    const body = nodeupBody();
    const bootstrap = controller.bootstrap;
    assert.ok(bootstrap);
    // nodeup trusts the serving certificate through kops' CA; what is tested here is the answer.
    const answer = await postNodeup(bootstrap.url, body, signAwsStsProof(body, session, cluster.region, 1));
    assert.equal(answer.status, 200, answer.text);
    const certs = (JSON.parse(answer.text) as { Certs: Record<string, string> }).Certs;
    assert.match(certs['kubelet'] ?? '', /^-----BEGIN CERTIFICATE-----/);
  });

  test('it stays ready; what kops does not grant is only what the features listed as off need, each named in the log', async () => {
    await until('every listed feature has asked once', async () =>
      Object.values(offWithoutOurRules).every((pattern) => [...refused].some((path) => pattern.test(path))),
    );
    const ready = await fetch(`${controller.url}/readyz`);
    assert.equal(ready.status, 200, await ready.text());
    // No gauge rather than counts without the pods, which would read as healthy.
    assert.doesNotMatch(await (await fetch(`${controller.url}/metrics`)).text(), /^kops_node_ready\{/m);
    const unexpected = [...refused].filter(
      (path) => !Object.values(offWithoutOurRules).some((pattern) => pattern.test(path)),
    );
    assert.deepEqual(unexpected, [], 'refused requests no listed feature explains');
    // Each refusal reaches the log, naming what RBAC refused.
    for (const resource of [
      'secrets',
      'certificatesigningrequests',
      'pods',
      'componentstatuses',
      'configmaps',
    ]) {
      assert.ok(
        lines.some((line) => line.includes('forbidden') && line.includes(resource)),
        `no warning names the refused ${resource}`,
      );
    }
  });
});
