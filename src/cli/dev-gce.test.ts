import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { InvalidInputError } from '../errors.ts';
import { type GceDevCluster, startGceDevCluster } from '../sim/dev-cluster.ts';
import { devBanner } from '../sim/dev-run.ts';
import { startJoiningNodes } from '../sim/joining-nodes.ts';
import { runCli } from '../testing/cli.ts';
import { waitForGroupLabels } from '../testing/kubectl.ts';
import { controllerBannerLines, type DevController, startDevController } from './dev-controller.ts';

const execFileAsync = promisify(execFile);

describe('kops-controller dev --cloud gce', () => {
  let dir: string;
  let cluster: GceDevCluster;
  let controller: DevController;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'dev-gce-'));
    cluster = await startGceDevCluster({ stateDir: dir });
    controller = await startDevController(cluster, { bootstrapPolicy: 'gce' });
  });
  after(async () => {
    await controller.stop();
    await cluster.close();
    await rm(dir, { recursive: true, force: true });
  });

  test('labels every node from its MIG’s template, and new instances join with their identity tokens', async () => {
    const bootstrap = controller.bootstrap;
    assert.ok(bootstrap);
    assert.match(
      devBanner(cluster, controllerBannerLines(controller)),
      /GCE endpoints .*project testproject, zone us-test1-a/,
    );
    const joining = startJoiningNodes({
      cluster,
      server: bootstrap.url,
      caPin: bootstrap.caPin,
      count: 2,
      proof: 'cloud',
      dir: join(dir, 'nodes'),
    });
    await joining.done;
    assert.deepEqual(joining.status(), { total: 2, joined: 2, waiting: 0, failed: 0 });
    // The joined machines were launched into a MIG of the worker group, so they get its labels too.
    const expected = [
      ...[...cluster.nodesByGroup].flatMap(([group, nodes]) => nodes.map((n) => [n, group] as const)),
      ...joining.nodes.map((n) => [n, 'nodes-us-test1-a'] as const),
    ];
    const { output, unlabelled } = await waitForGroupLabels(cluster.api.kubeconfigPath, expected);
    assert.deepEqual(unlabelled, [], output);
    // Identity came from GCE: the controller read instances, MIGs and templates, never the node's word.
    assert.ok(cluster.gce.count('instanceGroupManagers.listManagedInstances') > 0);
    assert.ok(cluster.gce.count('instanceTemplates.get') > 0);
  });

  test('validate in the environment dev writes reaches only the simulators, with metadata-server credentials', async () => {
    const before = { token: cluster.gce.count('metadata.token'), migs: migCalls() };
    // A clean environment: only what `.kops-dev/env` sets, a HOME without gcloud credentials, and a
    // proxy that refuses anything not on loopback, so a request to Google would fail the command.
    const env = {
      PATH: process.env['PATH'] ?? '',
      HOME: dir,
      HTTPS_PROXY: 'http://127.0.0.1:9',
      NO_PROXY: '127.0.0.1,localhost',
      ...cluster.env,
    };
    const bin = new URL('../../bin/kops-controller.js', import.meta.url).pathname;
    const { stdout } = await execFileAsync(
      process.execPath,
      [bin, 'validate', '--conf', cluster.configPath, '-o', 'json'],
      { env, timeout: 60_000 },
    );
    const report = JSON.parse(stdout) as { failures?: unknown[]; nodes: unknown[] };
    assert.deepEqual(report.failures ?? [], []);
    assert.ok(report.nodes.length > 0);
    assert.ok(
      cluster.gce.count('metadata.token') > before.token,
      'credentials came from the metadata server',
    );
    assert.ok(migCalls() > before.migs, 'the cloud groups came from the simulated compute API');
  });

  const migCalls = () =>
    [
      'instanceGroupManagers.aggregatedList',
      'instanceGroupManagers.list',
      'instanceGroupManagers.listManagedInstances',
      'instances.aggregatedList',
      'instances.list',
    ].reduce((sum, operation) => sum + cluster.gce.count(operation), 0);

  test('a cloud policy of the other cloud is refused before anything starts', async () => {
    await assert.rejects(
      runCli('dev', '--cloud', 'gce', '--policy', 'aws', '--state-dir', join(dir, 'refused')),
      (err: unknown) =>
        err instanceof InvalidInputError && /--policy aws needs --cloud aws/.test(err.message),
    );
  });
});
