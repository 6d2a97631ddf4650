import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { appendFile, mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { collectDefaultMetrics, Registry } from 'prom-client';
import { parseDocument } from 'yaml';
import { lockFolder } from '../runtime/folder-lock.ts';
import { type ResourceType, resourceTypeByName } from '../sim/apiserver/resources.ts';
import { type DevCluster, startDevCluster } from '../sim/dev-cluster.ts';
import { devBanner } from '../sim/dev-run.ts';
import { defaultPollIntervalMs } from '../statestore/cluster-store.ts';
import { openVfs, vfsOptionsFromEnv } from '../statestore/open.ts';
import { waitForGroupLabels } from '../testing/kubectl.ts';
import { parsePort } from './dev.ts';
import { controllerBannerLines, type DevController, startDevController } from './dev-controller.ts';

describe('kops-controller dev', () => {
  let dir: string;
  let cluster: DevCluster;
  let controller: DevController;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'dev-cli-'));
    cluster = await startDevCluster({ stateDir: dir });
    // A poll interval other than the default, to show the setting is the one that polls.
    await appendFile(cluster.configPath, 'stateStore:\n  pollInterval: 1s\n');
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

  test('an instance-group edit in the state store relabels its nodes, polled every stateStore.pollInterval', async () => {
    const [group, nodes] = [...cluster.nodesByGroup].find(([, names]) => names.length > 0) ?? [];
    assert.ok(group && nodes);
    const ready = await waitForGroupLabels(
      cluster.api.kubeconfigPath,
      nodes.map((n) => [n, group] as const),
    );
    assert.deepEqual(ready.unlabelled, [], ready.output);
    // The configured 1 s is what polls: over 3 s, at least two polls' HEADs (one for the cluster spec,
    // one per instance group), where the default 5 s would make at most one poll.
    const heads = () => cluster.s3.requestCounts()['HeadObject'] ?? 0;
    const before = heads();
    await new Promise((resolve) => setTimeout(resolve, 3_000));
    const perPoll = 1 + cluster.nodesByGroup.size;
    assert.ok(heads() - before >= 2 * perPoll, `${heads() - before} HEADs in 3 s; one poll makes ${perPoll}`);
    assert.ok(
      3_000 < defaultPollIntervalMs,
      'the window must be shorter than the default interval to tell them apart',
    );
    // As `kops edit ig` would: a new node label in the group's spec.nodeLabels.
    const vfs = openVfs(cluster.configBase, vfsOptionsFromEnv(cluster.env));
    const path = `instancegroup/${group}`;
    const doc = parseDocument((await vfs.read(path)).data.toString('utf8'));
    doc.setIn(['spec', 'nodeLabels', 'example.com/edited'], 'yes');
    await vfs.write(path, doc.toString());
    const store = cluster.api.server.store;
    const nodesType = resourceTypeByName('nodes') as ResourceType;
    const deadline = Date.now() + 30_000;
    const relabelled = () =>
      nodes.filter(
        (n) => store.entry(nodesType, undefined, n)?.object.metadata.labels?.['example.com/edited'] === 'yes',
      );
    while (relabelled().length < nodes.length && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    assert.deepEqual(relabelled(), nodes);
  });

  test('serves metrics, the Node.js process metrics as run does among them, and the banner says where', async () => {
    const metrics = await (await fetch(`${controller.url}/metrics`)).text();
    assert.match(metrics, /^node_controller_reconciles_total\{result="labelled"\} \d+$/m);
    // docs/operations.md: "Besides the standard Node.js process metrics (process_*, nodejs_*)".
    const defaults = new Registry();
    collectDefaultMetrics({ register: defaults });
    const families = (text: string) =>
      [...text.matchAll(/^# TYPE ((?:process|nodejs)_\w+) /gm)].map((m) => m[1] as string).sort();
    assert.deepEqual(families(metrics), families(await defaults.metrics()));
    assert.match(metrics, /^process_cpu_user_seconds_total \d/m);
    assert.match(
      devBanner(cluster, controllerBannerLines(controller)),
      new RegExp(`Controller +${controller.url}/metrics`),
    );
  });

  test('parsePort refuses what is not a port', () => {
    assert.equal(parsePort('0', '--port'), 0);
    assert.throws(() => parsePort('70000', '--port'), /expected a port number/);
    assert.throws(() => parsePort('http', '--port'), /expected a port number/);
  });
});

describe('kops-controller dev on a state directory in use', () => {
  test('a second dev exits 75 with one line naming the process that holds it, and touches nothing', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'dev-locked-'));
    // This test process is the first dev: a live process holding the lock.
    const held = await lockFolder(dir, 'x');
    try {
      const second = spawn(
        process.execPath,
        [join(import.meta.dirname, 'main.ts'), 'dev', '--state-dir', dir, '--joining-nodes', '0'],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      );
      let stdout = '';
      let stderr = '';
      second.stdout.on('data', (chunk: Buffer) => (stdout += chunk));
      second.stderr.on('data', (chunk: Buffer) => (stderr += chunk));
      // Bounded: without the lock, the second dev starts a whole cluster and runs until stopped.
      const code = await Promise.race([
        new Promise<number | null>((resolve) => second.once('exit', resolve)),
        new Promise<'running'>((resolve) => setTimeout(() => resolve('running'), 20_000).unref()),
      ]);
      second.kill('SIGKILL');
      assert.equal(code, 75, stderr);
      assert.match(
        stderr,
        new RegExp(
          `^kops-controller: ${dir} is in use by process ${process.pid}, started \\S+; ` +
            'stop that kops-controller dev \\(npm start\\) first, or give this one another --state-dir\\n$',
        ),
      );
      assert.equal(stdout, '', 'no banner: nothing was started');
      assert.deepEqual(await readdir(dir), ['lock']);
    } finally {
      await held.release();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
