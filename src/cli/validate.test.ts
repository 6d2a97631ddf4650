import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { exitCodeOf, InvalidInputError, KopsError, NotFoundError } from '../errors.ts';
import type { KubeObject } from '../sim/apiserver/index.ts';
import { simInstanceId } from '../sim/aws/scenario.ts';
import { type DevCluster, startDevCluster } from '../sim/dev-cluster.ts';
import { seedClusterStore } from '../statestore/cluster-store.ts';
import { openVfs, vfsOptionsFromEnv } from '../statestore/open.ts';
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
    const json = JSON.parse(await validate('-o', 'json')) as { failures?: unknown[]; nodes: unknown[] };
    // kops' `failures,omitempty` (pkg/validation/validate_cluster.go): no key when ready.
    assert.equal('failures' in json, false);
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

  /** A Ready Node as a kubelet registers it, with the instance-group label kops' nodeup sets. */
  function extraNode(name: string, providerID: string, ready: boolean): KubeObject {
    return {
      apiVersion: 'v1',
      kind: 'Node',
      metadata: {
        name,
        labels: { 'kubernetes.io/hostname': name, 'kops.k8s.io/instancegroup': 'nodes-us-test-1a' },
      },
      spec: { providerID },
      status: {
        conditions: [{ type: 'Ready', status: ready ? 'True' : 'False' }],
      },
    };
  }

  test('-o json is kops’ ValidationCluster: instance groups as objects, zones filled, no extra fields', async () => {
    // Field names and shapes of pkg/validation/validate_cluster.go ValidationError and ValidationNode
    // (kubernetes/kops @ 268927e2); see src/validation/kops-output.test.ts.
    const [first] = cluster.nodesByGroup.get('nodes-us-test-1a') as string[];
    const store = cluster.api.server.store;
    const removed = store.get('nodes', undefined, first as string) as KubeObject;
    store.delete('nodes', undefined, first as string);
    try {
      const { output, error } = await runCliResult('validate', '--conf', cluster.configPath, '-o', 'json');
      assert.equal(exitCodeOf(error), 69);
      const json = JSON.parse(output) as {
        failures: Record<string, unknown>[];
        nodes: Record<string, unknown>[];
      };
      assert.deepEqual(Object.keys(json), ['failures', 'nodes']);
      const [failure] = json.failures;
      assert.deepEqual(Object.keys(failure ?? {}), ['type', 'name', 'message', 'instanceGroup']);
      const ig = failure?.['instanceGroup'] as {
        kind: string;
        metadata: { name: string };
        spec: { role: string };
      };
      assert.equal(ig.kind, 'InstanceGroup');
      assert.equal(ig.metadata.name, 'nodes-us-test-1a');
      assert.equal(ig.spec.role, 'Node');
      for (const n of json.nodes) {
        assert.deepEqual(Object.keys(n), ['name', 'zone', 'role', 'hostname', 'status']);
        assert.match(String(n['zone']), /^us-test-1[a-z]$/, 'the zone, from the providerID');
      }
    } finally {
      store.create(removed);
    }
  });

  test('nodes joined outside any Auto Scaling group are validated too: as many as kubectl shows', async () => {
    const store = cluster.api.server.store;
    // Two machines tagged with the instance group but in no Auto Scaling group (as `dev`'s joining
    // machines are): one Ready, one NotReady.
    const ids = [simInstanceId(90_001), simInstanceId(90_002)];
    cluster.aws.ec2.addInstances(
      ids.map((id) => ({
        id,
        zone: 'us-test-1a',
        cluster: cluster.clusterName,
        instanceGroup: 'nodes-us-test-1a',
      })),
    );
    store.create(extraNode(ids[0] as string, `aws:///us-test-1a/${ids[0]}`, true));
    store.create(extraNode(ids[1] as string, `aws:///us-test-1a/${ids[1]}`, false));
    try {
      const { output, error } = await runCliResult('validate', '--conf', cluster.configPath);
      assert.equal(exitCodeOf(error), 69);
      const kubectl = store.list('nodes').length;
      const listed = output.split('NODE STATUS\n')[1]?.split('\n\n')[0]?.split('\n').slice(1).filter(Boolean);
      assert.equal(listed?.length, kubectl, output);
      assert.match(output, new RegExp(`^${ids[0]} +node +True$`, 'm'));
      assert.match(
        output,
        new RegExp(`^Node +${ids[1]} +node "${ids[1]}" of role "node" is not ready$`, 'm'),
      );
    } finally {
      for (const id of ids) store.delete('nodes', undefined, id);
    }
  });

  test('--instance-group validates the named groups only; an unknown name exits 66 naming the groups', async () => {
    const [first] = cluster.nodesByGroup.get('nodes-us-test-1a') as string[];
    const store = cluster.api.server.store;
    const removed = store.get('nodes', undefined, first as string) as KubeObject;
    store.delete('nodes', undefined, first as string);
    try {
      const others = [...cluster.nodesByGroup.keys()].filter((g) => g !== 'nodes-us-test-1a');
      const out = await validate('--instance-group', others.join(','));
      assert.match(out, /is ready$/m);
      assert.doesNotMatch(out, new RegExp(first as string));
      const bad = await runCliResult('validate', '--conf', cluster.configPath, '--instance-group', 'workers');
      assert.ok(bad.error instanceof NotFoundError, String(bad.error));
      assert.match(bad.error.message, /^instance group "workers" not found; the cluster has: /);
      assert.equal(exitCodeOf(bad.error), 66);
    } finally {
      store.create(removed);
    }
  });

  test('while --wait waits, each attempt prints a progress line on standard error', async () => {
    const [node] = cluster.nodesByGroup.get('nodes-us-test-1a') as string[];
    const store = cluster.api.server.store;
    const removed = store.get('nodes', undefined, node as string) as KubeObject;
    store.delete('nodes', undefined, node as string);
    const back = setTimeout(() => store.create(removed), 400);
    try {
      const out = await validate('--wait', '20s', '--interval', '100ms');
      assert.match(
        out,
        new RegExp(
          `^validation attempt 1: not ready, 1 failure \\(Machine/${node}\\); validating again in 100ms$`,
          'm',
        ),
      );
      assert.match(out, /^Your cluster minimal\.example\.com is ready$/m);
    } finally {
      clearTimeout(back);
      if (!store.get('nodes', undefined, node as string)) store.create(removed);
    }
  });

  test('a state store without instance groups is refused, never "ready" (kops: "no InstanceGroup objects found")', async () => {
    // cmd/kops/validate_cluster.go RunValidateCluster returns that error (exit 1 in kops); ours is a
    // not-found error, exit 66, like every missing input.
    const configBase = cluster.configBase.replace(/[^/]+$/, 'empty.example.com');
    const root = configBase.replace(/\/[^/]+$/, '');
    const vfs = openVfs(root, vfsOptionsFromEnv(process.env));
    await seedClusterStore(vfs, 'empty.example.com', {
      cluster:
        'apiVersion: kops.k8s.io/v1alpha2\nkind: Cluster\nmetadata:\n  name: empty.example.com\nspec:\n  cloudProvider: aws\n',
      instanceGroups: [],
    });
    const conf = join(dir, 'empty.yaml');
    await writeFile(
      conf,
      (await readFile(cluster.configPath, 'utf8')).replace(/^configBase: .*$/m, `configBase: ${configBase}`),
    );
    const { output, error } = await runCliResult('validate', '--conf', conf);
    assert.ok(error instanceof NotFoundError, String(error));
    assert.match(error.message, /^no InstanceGroup objects found/);
    assert.equal(exitCodeOf(error), 66);
    assert.doesNotMatch(output, /is ready/);
  });
});
