import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { exitCodeOf, InvalidInputError, KopsError, NotFoundError } from '../errors.ts';
import { type KubeObject, type SimApiServer, startApiServer } from '../sim/apiserver/index.ts';
import { simInstanceId } from '../sim/aws/scenario.ts';
import { type DevCluster, startDevCluster } from '../sim/dev-cluster.ts';
import { seedClusterStore } from '../statestore/cluster-store.ts';
import type { InstanceGroup } from '../statestore/kops-types.ts';
import { openVfs, vfsOptionsFromEnv } from '../statestore/open.ts';
import { runCli, runCliResult } from '../testing/cli.ts';
import { formatValidationTable } from './validate.ts';

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
    // cmd/kops/validate_cluster.go: the header, then the instance groups with their spec role.
    assert.match(
      out,
      /^Validating cluster minimal\.example\.com\n\nINSTANCE GROUPS\nNAME +ROLE +MACHINETYPE +MIN +MAX +SUBNETS\n/,
    );
    assert.match(out, /^control-plane-us-test-1a +ControlPlane +m5\.large +1 +1 +us-test-1a$/m);
    assert.match(out, /^nodes-us-test-1a +Node +/m);
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

  test('--wait is measured on the monotonic clock: a wall clock stepped ahead does not end it early', async (t) => {
    const [node] = cluster.nodesByGroup.get('nodes-us-test-1a') as string[];
    const store = cluster.api.server.store;
    const removed = store.get('nodes', undefined, node as string) as KubeObject;
    store.delete('nodes', undefined, node as string);
    // The wall clock is mocked (and still), and stepped once the first validation has begun: by
    // 10 minutes, which the simulated S3 still accepts in the signatures made before the step.
    t.mock.timers.enable({ apis: ['Date'], now: Date.now() });
    const step = setTimeout(() => t.mock.timers.setTime(Date.now() + 600_000), 50);
    try {
      const started = performance.now();
      const waited = await runCliResult(
        ...['validate', '--conf', cluster.configPath, '--wait', '1500ms', '--interval', '100ms'],
      );
      const waitedMs = performance.now() - started;
      assert.match(String((waited.error as Error).message), /not ready 1 time\(s\) in a row within 1500ms$/);
      assert.ok(waitedMs >= 1_400, `gave up after ${waitedMs} ms`);
    } finally {
      clearTimeout(step);
      t.mock.timers.reset();
      store.create(removed);
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
      assert.equal(out.match(/^Validating cluster /gm)?.length, 1, 'kops prints its header once');
      assert.match(out, /^Your cluster minimal\.example\.com is ready$/m);
    } finally {
      clearTimeout(back);
      if (!store.get('nodes', undefined, node as string)) store.create(removed);
    }
  });

  test('--wait retries an error it may outlive (kops: "(will retry): unexpected error during validation")', async () => {
    // cmd/kops/validate_cluster.go RunValidateCluster: with --wait, an error of validator.Validate is
    // logged and validation tried again after --interval.
    const faults = cluster.api.server.faults;
    faults.errors({ resource: 'nodes', verbs: ['list'], status: 503, count: 2 });
    try {
      const out = await validate('--wait', '20s', '--interval', '100ms');
      const retries = out.match(
        /^validation attempt \d: unexpected error during validation \(will retry\): list \/api\/v1\/nodes: .+; validating again in 100ms$/gm,
      );
      assert.equal(retries?.length, 2, out);
      assert.match(out, /^Your cluster minimal\.example\.com is ready$/m);
    } finally {
      faults.reset();
    }
  });

  test('--wait gives up on a lasting outage when the time is up, with its error (exit 69)', async () => {
    // A process of its own: the exit code is the process's, and nothing but the wait may keep it alive.
    // The API server refuses connections (nothing listens on port 1 of loopback).
    const kubeconfig = join(dir, 'refused.kubeconfig');
    await writeFile(
      kubeconfig,
      [
        'apiVersion: v1',
        'kind: Config',
        'clusters: [{name: r, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]',
        'users: [{name: u, user: {token: t}}]',
        'contexts: [{name: r, context: {cluster: r, user: u}}]',
        'current-context: r',
        '',
      ].join('\n'),
    );
    const args = [
      '--conf',
      cluster.configPath,
      '--kubeconfig',
      kubeconfig,
      '--wait',
      '2s',
      '--interval',
      '200ms',
    ];
    const started = Date.now();
    const child = spawn(process.execPath, ['src/cli/main.ts', 'validate', ...args], {
      cwd: new URL('../..', import.meta.url),
      env: process.env,
    });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    const [code] = (await once(child, 'exit')) as [number | null];
    assert.equal(code, 69, stderr);
    assert.ok(Date.now() - started >= 1_000, 'it waited');
    const retries = stderr.match(
      /^validation attempt \d: unexpected error during validation \(will retry\): list \/api\/v1\/(nodes|pods): connect ECONNREFUSED 127\.0\.0\.1:1; validating again in 200ms$/gm,
    );
    assert.ok((retries?.length ?? 0) >= 2, stderr);
    assert.match(
      stderr,
      /^kops-controller: list \/api\/v1\/(nodes|pods): connect ECONNREFUSED 127\.0\.0\.1:1$/m,
    );
  });

  test('--wait does not retry what waiting cannot mend: an unknown instance group exits 66 at once', async () => {
    const started = Date.now();
    const { output, error } = await runCliResult(
      'validate',
      '--conf',
      cluster.configPath,
      '--instance-group',
      'workers',
      '--wait',
      '20s',
      '--interval',
      '100ms',
    );
    assert.ok(error instanceof NotFoundError, String(error));
    assert.equal(exitCodeOf(error), 66);
    assert.ok(Date.now() - started < 5_000, 'no retries');
    assert.doesNotMatch(output, /will retry/);
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

describe('kops-controller validate on metal: hosts are matched to their Nodes by name', () => {
  // kops' nodeup sets no providerID on metal (AWS and Azure only) and no cloud controller runs there;
  // the inventory names each host as its Node is named, and kops' metal GetCloudGroups
  // (upup/pkg/fi/cloudup/metal/cloud.go) matches Nodes by name.
  let dir: string;
  let api: SimApiServer;
  let args: string[];
  const clusterName = 'metal.example.com';

  /** A Node as kubelet registers it on metal: no providerID. */
  function hostNode(name: string, controlPlane: boolean): KubeObject {
    return {
      apiVersion: 'v1',
      kind: 'Node',
      metadata: {
        name,
        labels: controlPlane ? { 'node-role.kubernetes.io/control-plane': '' } : {},
      },
      status: { conditions: [{ type: 'Ready', status: 'True' }] },
    };
  }

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'validate-metal-'));
    api = await startApiServer();
    const configBase = `memfs://validate-metal-${Math.random().toString(36).slice(2)}/${clusterName}`;
    const vfs = openVfs(configBase.replace(/\/[^/]+$/, ''));
    const igYaml = (name: string, role: string) =>
      `apiVersion: kops.k8s.io/v1alpha2\nkind: InstanceGroup\nmetadata:\n  name: ${name}\nspec:\n  role: ${role}\n  minSize: 1\n  maxSize: 2\n`;
    await seedClusterStore(vfs, clusterName, {
      cluster: `apiVersion: kops.k8s.io/v1alpha2\nkind: Cluster\nmetadata:\n  name: ${clusterName}\nspec: {}\n`,
      instanceGroups: [igYaml('control-plane', 'ControlPlane'), igYaml('nodes', 'Node')],
    });
    await vfs.write(
      `${clusterName}/metal/inventory.yaml`,
      [
        'hosts:',
        '  - {name: cp-1, instanceGroup: control-plane, addresses: [10.0.0.10]}',
        '  - {name: node-1, instanceGroup: nodes, addresses: [10.0.0.11]}',
        '  - {name: node-2, instanceGroup: nodes, addresses: [10.0.0.12], providerID: "metal://rack4-u12"}',
        '',
      ].join('\n'),
    );
    for (const [name, controlPlane] of [
      ['cp-1', true],
      ['node-1', false],
      ['node-2', false],
    ] as const) {
      api.store.create(hostNode(name, controlPlane));
    }
    for (const app of ['kube-apiserver', 'kube-controller-manager', 'kube-scheduler']) {
      api.store.create({
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: { namespace: 'kube-system', name: `${app}-cp-1`, labels: { 'k8s-app': app } },
        spec: { nodeName: 'cp-1', containers: [{ name: app, image: app }] },
        status: { phase: 'Running' },
      });
    }
    const conf = join(dir, 'config.yaml');
    await writeFile(conf, `clusterName: ${clusterName}\ncloud: metal\nconfigBase: ${configBase}\n`);
    const kubeconfig = join(dir, 'kubeconfig');
    await writeFile(kubeconfig, api.kubeconfig());
    args = ['validate', '--conf', conf, '--kubeconfig', kubeconfig];
  });
  after(async () => {
    await api.close();
    await rm(dir, { recursive: true, force: true });
  });

  test('a healthy metal cluster is ready; a host without its Node has not joined; a NotReady Node fails once', async () => {
    const out = await runCli(...args);
    assert.match(out, /^cp-1 +control-plane +True$/m);
    assert.match(out, /^node-2 +node +True$/m);
    assert.match(out, /^Your cluster metal\.example\.com is ready$/m);
    const store = api.store;
    const removed = store.get('nodes', undefined, 'node-1') as KubeObject;
    store.delete('nodes', undefined, 'node-1');
    const notReady = structuredClone(store.get('nodes', undefined, 'node-2') as KubeObject);
    (notReady['status'] as { conditions: { status: string }[] }).conditions[0] = {
      type: 'Ready',
      status: 'False',
    } as { status: string };
    store.update(notReady);
    try {
      const { output, error } = await runCliResult(...args, '-o', 'json');
      assert.equal(exitCodeOf(error), 69, String(error));
      const failures = (JSON.parse(output) as { failures: { type: string; name: string; message: string }[] })
        .failures;
      assert.deepEqual(
        failures.map((f) => `${f.type}/${f.name}: ${f.message}`),
        [
          'Machine/node-1: machine "node-1" has not yet joined cluster',
          'Node/node-2: node "node-2" of role "node" is not ready',
        ],
      );
    } finally {
      store.create(removed);
    }
  });
});

describe('formatValidationTable', () => {
  test('as kops prints it: the spec role, "-" for an unset size, the verdict after a blank line', () => {
    // cmd/kops/validate_cluster.go validateClusterOutputTable: ROLE is string(Spec.Role), MIN and MAX
    // int32PointerToString (cmd/kops/get_instancegroups.go).
    const ig = (name: string, role: InstanceGroup['spec']['role'], sizes: object) =>
      ({
        apiVersion: 'kops.k8s.io/v1alpha2',
        kind: 'InstanceGroup',
        metadata: { name },
        spec: { role, ...sizes },
      }) as InstanceGroup;
    const out = formatValidationTable(
      'c.example.com',
      [
        ig('cp', 'ControlPlane', { minSize: 1, maxSize: 1 }),
        ig('api', 'APIServer', {}),
        ig('b', 'Bastion', {}),
      ],
      { failures: [], nodes: [] },
    );
    assert.match(out, /^cp +ControlPlane +1 +1$/m);
    assert.match(out, /^api +APIServer +- +-$/m);
    assert.match(out, /^b +Bastion +- +-$/m);
    assert.match(out, /\n\nYour cluster c\.example\.com is ready\n$/);
  });
});
