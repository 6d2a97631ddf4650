import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { type DevCluster, startDevCluster } from '../sim/dev-cluster.ts';
import { waitForGroupLabels } from '../testing/kubectl.ts';
import { type DevController, devBanner, parsePort, startDevController } from './dev.ts';

describe('kops-controller dev', () => {
  let dir: string;
  let cluster: DevCluster;
  let controller: DevController;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'dev-cli-'));
    cluster = await startDevCluster({ stateDir: dir });
    controller = await startDevController(cluster);
  });
  after(async () => {
    await controller.stop();
    await cluster.close();
    await rm(dir, { recursive: true, force: true });
  });

  test('the controller labels the simulated nodes: kubectl get nodes --show-labels shows the kops labels', async () => {
    const expected = [...cluster.nodesByGroup].flatMap(([group, nodes]) =>
      nodes.map((n) => [n, group] as const),
    );
    const { output, unlabelled } = await waitForGroupLabels(cluster.api.kubeconfigPath, expected);
    assert.deepEqual(unlabelled, [], output);
    assert.match(output, /node-role\.kubernetes\.io\/control-plane=/);
    assert.match(output, /node-role\.kubernetes\.io\/node=/);
  });

  test('serves metrics, and the banner says where', async () => {
    const metrics = await (await fetch(`${controller.url}/metrics`)).text();
    assert.match(metrics, /^node_controller_reconciles_total\{result="labelled"\} \d+$/m);
    assert.match(devBanner(cluster, controller), new RegExp(`Controller +${controller.url}/metrics`));
  });

  test('parsePort refuses what is not a port', () => {
    assert.equal(parsePort('0', '--port'), 0);
    assert.throws(() => parsePort('70000', '--port'), /expected a port number/);
    assert.throws(() => parsePort('http', '--port'), /expected a port number/);
  });
});
