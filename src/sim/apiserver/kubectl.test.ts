/** Contract tests through the real kubectl (1.20), which must work against the simulator unchanged. */
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { toolPath } from '../../testing/tools.ts';
import { createCertificateRequest } from '../tls.ts';
import { type SimApiServer, startApiServer } from './index.ts';

const run = promisify(execFile);

describe('simulated apiserver through kubectl', () => {
  let sim: SimApiServer;
  let dir: string;
  let kubectl: (...args: string[]) => Promise<string>;
  before(async () => {
    sim = await startApiServer();
    dir = await mkdtemp(join(tmpdir(), 'sim-kubectl-'));
    const kubeconfig = join(dir, 'kubeconfig');
    await writeFile(kubeconfig, sim.kubeconfig(), { mode: 0o600 });
    const binary = toolPath('kubectl');
    kubectl = async (...args) =>
      (await run(binary, ['--kubeconfig', kubeconfig, ...args], { timeout: 30_000 })).stdout;
    sim.store.create({
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name: 'node-a', labels: { pool: 'blue' } },
    });
    sim.store.create({
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'web', namespace: 'kube-system', labels: { app: 'web' } },
      spec: { nodeName: 'node-a', containers: [{ name: 'c', image: 'nginx' }] },
    });
  });
  after(async () => {
    await sim.close();
    await rm(dir, { recursive: true, force: true });
  });

  test('get nodes -o json returns the stored objects', async () => {
    const list = JSON.parse(await kubectl('get', 'nodes', '-o', 'json'));
    assert.deepEqual(
      list.items.map((n: { metadata: { name: string } }) => n.metadata.name),
      ['node-a'],
    );
    assert.equal(list.items[0].metadata.labels.pool, 'blue');
  });

  test('get pods -A -l prints a table from the server', async () => {
    const out = await kubectl('get', 'pods', '-A', '-l', 'app=web');
    assert.match(out, /^NAMESPACE\s+NAME\s+READY\s+STATUS\s+RESTARTS\s+AGE\n/);
    assert.match(out, /kube-system\s+web\s+0\/1\s+Pending\s+0\s+\d+s/);
    assert.equal((await kubectl('get', 'pods', '-A', '-l', 'app=none', '-o', 'name')).trim(), '');
  });

  test('label and patch change the node', async () => {
    assert.match(
      await kubectl('label', 'node', 'node-a', 'kops.k8s.io/instancegroup=nodes'),
      /node\/node-a labeled/,
    );
    assert.match(
      await kubectl('patch', 'node', 'node-a', '--type', 'merge', '-p', '{"spec":{"unschedulable":true}}'),
      /patched/,
    );
    assert.match(
      await kubectl('patch', 'node', 'node-a', '-p', '{"metadata":{"labels":{"pool":null}}}'),
      /patched/,
    );
    const node = sim.store.get('nodes', undefined, 'node-a');
    assert.deepEqual(node?.metadata.labels, { 'kops.k8s.io/instancegroup': 'nodes' });
    assert.deepEqual(node?.['spec'], { unschedulable: true });
  });

  test('create -f validates against the served OpenAPI, and delete removes', async () => {
    const file = join(dir, 'cm.yaml');
    await writeFile(
      file,
      'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: default\ndata:\n  a: "1"\n',
    );
    assert.match(await kubectl('create', '-f', file), /configmap\/settings created/);
    assert.equal(sim.store.get('configmaps', 'default', 'settings')?.['data'] instanceof Object, true);
    assert.match(
      await kubectl('delete', 'configmap', 'settings', '-n', 'default'),
      /configmap "settings" deleted/,
    );
    assert.equal(sim.store.get('configmaps', 'default', 'settings'), undefined);
  });

  test('certificate approve adds the Approved condition through /approval', async () => {
    const { csr: pem } = await createCertificateRequest({
      name: 'system:node:node-a',
      groups: ['system:nodes'],
    });
    const request = Buffer.from(pem).toString('base64');
    sim.store.create({
      apiVersion: 'certificates.k8s.io/v1',
      kind: 'CertificateSigningRequest',
      metadata: { name: 'node-csr' },
      spec: {
        request,
        signerName: 'kubernetes.io/kube-apiserver-client-kubelet',
        usages: ['client auth'],
        username: 'system:node:node-a',
      },
    } as never);
    assert.match(await kubectl('certificate', 'approve', 'node-csr'), /approved/);
    const csr = sim.store.get('certificatesigningrequests', undefined, 'node-csr');
    const status = csr?.['status'] as { conditions: { type: string; reason: string }[] };
    assert.deepEqual(
      status.conditions.map((c) => [c.type, c.reason]),
      [['Approved', 'KubectlApprove']],
    );
    sim.store.create({
      apiVersion: 'certificates.k8s.io/v1',
      kind: 'CertificateSigningRequest',
      metadata: { name: 'denied-csr' },
      spec: { request, signerName: 'example.com/signer', usages: ['client auth'] },
    });
    assert.match(await kubectl('certificate', 'deny', 'denied-csr'), /denied/);
    assert.match(await kubectl('get', 'csr'), /denied-csr\s+\S+\s+example.com\/signer\s+\S*\s+Denied/);
  });

  test('auth can-i answers from the server authorizer', async () => {
    assert.equal((await kubectl('auth', 'can-i', 'delete', 'nodes')).trim(), 'yes');
    const nodeConfig = join(dir, 'node-kubeconfig');
    await writeFile(nodeConfig, sim.kubeconfig({ name: 'system:node:node-a', groups: ['system:nodes'] }), {
      mode: 0o600,
    });
    const asNode = (...args: string[]) =>
      run(toolPath('kubectl'), ['--kubeconfig', nodeConfig, ...args]).then(
        (r) => r.stdout.trim(),
        (err: { stdout: string }) => err.stdout.trim(),
      );
    assert.equal(await asNode('auth', 'can-i', 'list', 'nodes'), 'yes');
    assert.equal(await asNode('auth', 'can-i', 'list', 'secrets'), 'no');
    await assert.rejects(
      run(toolPath('kubectl'), ['--kubeconfig', nodeConfig, 'get', '--raw', '/metrics']),
      /Forbidden.*cannot get path "\/metrics"/,
      'a node may not read the apiserver metrics',
    );
  });

  test('get --raw /metrics serves the apiserver request counters, which promtool accepts', async () => {
    await kubectl('get', 'nodes');
    await assert.rejects(kubectl('get', 'node', 'missing'), /NotFound/);
    const text = await kubectl('get', '--raw', '/metrics');
    assert.match(
      text,
      /^apiserver_request_total\{code="200",component="apiserver",dry_run="",group="",resource="nodes",scope="cluster",subresource="",verb="LIST",version="v1"\} [1-9]\d*$/m,
    );
    assert.match(text, /^apiserver_storage_objects\{resource="nodes"\} [1-9]\d*$/m);
    assert.match(
      text,
      /^apiserver_request_total\{code="404",.*resource="nodes",scope="resource".*verb="GET"/m,
    );
    const check = spawn(toolPath('promtool'), ['check', 'metrics']);
    let problems = '';
    check.stdout.on('data', (c: Buffer) => {
      problems += c.toString();
    });
    check.stderr.on('data', (c: Buffer) => {
      problems += c.toString();
    });
    check.stdin.end(text);
    const code = await new Promise<number | null>((resolve) => check.once('exit', resolve));
    assert.equal(code, 0, problems);
    assert.equal(problems.trim(), '', 'no lint findings');
  });

  test('get nodes -w prints the list and then changes', async () => {
    const child = spawn(toolPath('kubectl'), [
      '--kubeconfig',
      join(dir, 'kubeconfig'),
      'get',
      'nodes',
      '-w',
      '-o',
      'name',
    ]);
    let out = '';
    let onData: () => void = () => undefined;
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      onData();
    });
    const lines = (n: number) =>
      new Promise<void>((resolve, reject) => {
        onData = () => {
          if (out.split('\n').filter(Boolean).length >= n) resolve();
        };
        child.once('exit', () => reject(new Error(`kubectl exited early: ${out}`)));
        onData();
      });
    try {
      await lines(1);
      sim.store.create({ apiVersion: 'v1', kind: 'Node', metadata: { name: 'node-b' } });
      await lines(2);
    } finally {
      child.kill();
    }
    assert.deepEqual(out.split('\n').filter(Boolean).slice(0, 2), ['node/node-a', 'node/node-b']);
  });
});
