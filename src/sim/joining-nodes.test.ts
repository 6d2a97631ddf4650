/**
 * What `kops-controller dev` shows: new machines join the simulated cluster through the real
 * bootstrap server under the `aws` policy, register their Nodes with their own credentials, and the
 * NodeController labels them from the instance group EC2 records.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { nodeFilePath } from '../agent/node-files.ts';
import { startDevController } from '../cli/dev-controller.ts';
import { runCliResult } from '../testing/cli.ts';
import { startDevCluster } from './dev-cluster.ts';
import { type JoiningStatus, startJoiningNodes } from './joining-nodes.ts';

const dir = await mkdtemp(join(tmpdir(), 'joining-nodes-'));
const cluster = await startDevCluster({ stateDir: dir, awsThrottling: false });
const controller = await startDevController(cluster, { bootstrapPolicy: 'aws' });

after(async () => {
  await controller.stop();
  await cluster.close();
  await rm(dir, { recursive: true, force: true });
});

test('machines join with their instance profile, register as themselves and get their group’s labels', async () => {
  const bootstrap = controller.bootstrap;
  assert.ok(bootstrap);
  assert.match(bootstrap.caPin, /^sha256:[0-9a-f]{64}$/);
  const seen: JoiningStatus[] = [];
  const joining = startJoiningNodes({
    cluster,
    server: bootstrap.url,
    caPin: bootstrap.caPin,
    count: 2,
    proof: 'cloud',
    dir: join(dir, 'nodes'),
    onChange: (status) => seen.push(status),
  });
  await joining.done;
  assert.deepEqual(joining.status(), { total: 2, joined: 2, waiting: 0, failed: 0 });
  assert.equal(seen.length, 2);
  const store = cluster.api.server.store;
  for (const name of joining.nodes) {
    let labels: Record<string, string> = {};
    for (let i = 0; i < 500 && !labels['kops.k8s.io/instancegroup']; i++) {
      labels = (store.get('nodes', undefined, name)?.metadata.labels ?? {}) as Record<string, string>;
      if (!labels['kops.k8s.io/instancegroup']) await new Promise((resolve) => setTimeout(resolve, 20));
    }
    assert.equal(labels['kops.k8s.io/instancegroup'], 'nodes-us-test-1a', `labels of ${name}`);
    const lease = store.get('leases', 'kube-node-lease', name) as
      | { spec?: Record<string, unknown> }
      | undefined;
    assert.equal(lease?.spec?.['holderIdentity'], name, `${name} keeps its heartbeat Lease`);
    assert.match(String(lease?.spec?.['renewTime']), /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
  }
});

test('one watch per resource: Nodes for the NodeController, the gauges and the guard; CSRs for the approver and the ledger', async () => {
  // Runs after the join above, so the guard has answered from its view of the Node watch.
  const metrics = await (await fetch(`${controller.url}/metrics`)).text();
  const watched = (prefix: string) =>
    new Set(
      [...metrics.matchAll(/^informer_\w+\{resource="([^"]+)"/gm)]
        .map((m) => m[1])
        .filter((r) => r?.startsWith(prefix)),
    );
  assert.deepEqual([...watched('nodes')], ['nodes']);
  // A consumer with a watch of its own would be a second list under the shared name.
  assert.match(metrics, /^informer_lists_total\{resource="nodes",result="success"\} 1$/m);
  assert.match(metrics, /^kops_controller_bootstrap_node_guard_reads_total\{source="watch"\} [1-9]\d*$/m);
  assert.deepEqual(
    [...watched('certificatesigningrequests'), ...watched('ledger')],
    ['certificatesigningrequests'],
    'the approver and the expiry ledger share one watch of every CSR',
  );
  assert.match(
    metrics,
    /^informer_lists_total\{resource="certificatesigningrequests",result="success"\} 1$/m,
  );
  const ready = await fetch(`${controller.url}/readyz`);
  assert.equal(ready.status, 200);
  assert.match(await ready.text(), /^\[\+\]informer-nodes ok$/m, 'ready once the Node cache has synced');
});

test('the dev chain is the printed config’s, aws then renewal: a joined machine renews with join --renew', async () => {
  const bootstrap = controller.bootstrap;
  assert.ok(bootstrap);
  const joining = startJoiningNodes({
    cluster,
    server: bootstrap.url,
    caPin: bootstrap.caPin,
    count: 1,
    proof: 'cloud',
    dir: join(dir, 'renewing'),
  });
  await joining.done;
  const name = joining.nodes[0] as string;
  const nodeDir = join(dir, 'renewing', name);
  const before = await readFile(nodeFilePath(nodeDir, 'clientCertificate'), 'utf8');
  const { output, error } = await runCliResult(
    ...['join', '--renew', '--server', bootstrap.url, '--ca-pin', bootstrap.caPin],
    ...['--cluster-name', cluster.clusterName, '--dir', nodeDir, '-o', 'json'],
  );
  assert.equal(error, undefined, `${output}${error instanceof Error ? error.message : ''}`);
  assert.equal(JSON.parse(output).nodeName, name);
  assert.notEqual(await readFile(nodeFilePath(nodeDir, 'clientCertificate'), 'utf8'), before);
});
