import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { exitCodeOf, InvalidInputError, KopsError } from '../errors.ts';
import type { KubeObject } from '../sim/apiserver/index.ts';
import { type DevCluster, startDevCluster } from '../sim/dev-cluster.ts';
import { runCli, runCliResult } from '../testing/cli.ts';

describe('kops-controller validate against the simulated cluster', () => {
  let dir: string;
  let cluster: DevCluster;
  const savedEnv = { ...process.env };
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'validate-'));
    cluster = await startDevCluster({ stateDir: dir, awsThrottling: false });
    // The command reads the state store and AWS endpoints from the environment, as in a pod.
    Object.assign(process.env, cluster.env);
  });
  after(async () => {
    for (const key of Object.keys(cluster.env)) {
      if (savedEnv[key] === undefined) delete process.env[key];
      else process.env[key] = savedEnv[key];
    }
    await cluster.close();
    await rm(dir, { recursive: true, force: true });
  });

  const validate = (...args: string[]) => runCli('validate', '--conf', cluster.configPath, ...args);

  test('a fresh cluster is ready: kops sections, every node listed with its role', async () => {
    const out = await validate();
    assert.match(out, /^INSTANCE GROUPS\nNAME +ROLE +MACHINETYPE +MIN +MAX +SUBNETS\n/);
    assert.match(out, /^control-plane-us-test-1a +control-plane +m5\.large +1 +1 +us-test-1a$/m);
    assert.match(out, /^NODE STATUS\nNAME +ROLE +READY\n/m);
    for (const nodes of cluster.nodesByGroup.values()) {
      for (const node of nodes) assert.match(out, new RegExp(`^${node} +(control-plane|node) +True$`, 'm'));
    }
    assert.match(out, /^Your cluster minimal\.example\.com is ready$/m);
    const json = JSON.parse(await validate('-o', 'json')) as { failures: unknown[]; nodes: unknown[] };
    assert.deepEqual(json.failures, []);
    assert.equal(json.nodes.length, [...cluster.nodesByGroup.values()].flat().length);
  });

  test('a machine whose node is gone and a node that is not Ready fail it (exit code 69, EX_UNAVAILABLE)', async () => {
    const [first, second] = cluster.nodesByGroup.get('nodes-us-test-1a') as string[];
    const store = cluster.api.server.store;
    const removed = store.get('nodes', undefined, first as string) as KubeObject;
    store.delete('nodes', undefined, first as string);
    const notReady = structuredClone(store.get('nodes', undefined, second as string) as KubeObject);
    const status = notReady['status'] as { conditions: { type: string; status: string }[] };
    (status.conditions[0] as { status: string }).status = 'False';
    store.update(notReady);
    try {
      const table = await runCliResult('validate', '--conf', cluster.configPath);
      assert.ok(
        table.error instanceof KopsError &&
          table.error.kind === 'unavailable' &&
          /^validation failed: the cluster is not ready \(2 errors\)$/.test(table.error.message),
        String(table.error),
      );
      assert.equal(exitCodeOf(table.error), 69);
      assert.match(table.output, /^VALIDATION ERRORS\nKIND +NAME +MESSAGE\n/m);
      assert.match(table.output, /^Validation Failed$/m);
      const json = await runCliResult('validate', '--conf', cluster.configPath, '-o', 'json');
      const failures = (
        JSON.parse(json.output) as { failures: { type: string; name: string; message: string }[] }
      ).failures;
      assert.deepEqual(
        failures.map((f) => `${f.type}/${f.name}: ${f.message}`),
        [
          `Machine/${first}: machine "${first}" has not yet joined cluster`,
          `Node/${second}: node "${second}" of role "node" is not ready`,
        ],
      );
      const waited = await runCliResult(
        'validate',
        '--conf',
        cluster.configPath,
        '--wait',
        '300ms',
        '--interval',
        '100ms',
      );
      assert.match(String((waited.error as Error).message), /not ready 1 time\(s\) in a row within 300ms$/);
      // Two unready workers are within --max-unready-nodes 2.
      assert.match(await validate('--max-unready-nodes', '2'), /is ready$/m);
    } finally {
      store.create(removed);
      const ready = structuredClone(store.get('nodes', undefined, second as string) as KubeObject);
      ((ready['status'] as { conditions: { status: string }[] }).conditions[0] as { status: string }).status =
        'True';
      store.update(ready);
    }
  });

  test('--wait keeps validating until the cluster is ready --count times in a row', async () => {
    const [node] = cluster.nodesByGroup.get('nodes-us-test-1a') as string[];
    const store = cluster.api.server.store;
    const removed = store.get('nodes', undefined, node as string) as KubeObject;
    store.delete('nodes', undefined, node as string);
    // The machine's node comes back while validate is waiting.
    const back = setTimeout(() => store.create(removed), 400);
    try {
      const out = await validate('--wait', '20s', '--interval', '100ms', '--count', '2');
      assert.match(out, /^Your cluster minimal\.example\.com is ready$/m);
    } finally {
      clearTimeout(back);
      if (!store.get('nodes', undefined, node as string)) store.create(removed);
    }
  });

  test('--count above 1 needs --wait; bad numbers and durations are input errors', async () => {
    for (const args of [
      ['--count', '2'],
      ['--count', '0'],
      ['--max-unready-nodes', '-1'],
      ['--wait', 'soon'],
    ]) {
      await assert.rejects(validate(...args), InvalidInputError, args.join(' '));
    }
  });
});
