import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { parse } from 'yaml';
import { buildNodeLabels } from '../nodelabels/build-node-labels.ts';
import { fixturePath } from '../statestore/fixtures.ts';
import { parseCluster, parseInstanceGroup } from '../statestore/kops-types.ts';

const root = new URL('../..', import.meta.url);
const cli = (args: string[]) =>
  spawnSync(process.execPath, ['src/cli/main.ts', 'labels', ...args], { encoding: 'utf8', cwd: root });
const awsCluster = fixturePath('aws', 'cluster.yaml');
const highMemory = fixturePath('aws', 'instancegroup', 'high-memory-us-test-1b.yaml');
const dir = await mkdtemp(join(tmpdir(), 'kc-labels-cli-'));
after(() => rm(dir, { recursive: true, force: true }));

test('-o json prints the label object buildNodeLabels computes', async () => {
  const run = cli(['--cluster', awsCluster, '--instance-group', highMemory, '-o', 'json']);
  assert.equal(run.status, 0, run.stderr);
  const expected = buildNodeLabels(
    parseCluster(await readFile(awsCluster, 'utf8')),
    parseInstanceGroup(await readFile(highMemory, 'utf8')),
  );
  assert.deepEqual(JSON.parse(run.stdout), expected);
  assert.equal(JSON.parse(run.stdout)['node-role.kubernetes.io/node'], '');
});

test('-o yaml prints the same object; the table shows where each label comes from', () => {
  const cp = fixturePath('aws', 'instancegroup', 'control-plane-us-test-1a.yaml');
  const yaml = cli(['--cluster', awsCluster, '--instance-group', cp, '-o', 'yaml']);
  assert.equal(parse(yaml.stdout)['node-role.kubernetes.io/control-plane'], '');
  const table = cli(['--cluster', awsCluster, '--instance-group', cp]);
  assert.equal(table.status, 0);
  assert.match(table.stdout, /^LABEL\s+VALUE\s+SOURCE\n/);
  assert.match(table.stdout, /\nexample\.com\/fleet\s+control-plane\s+cluster kubelet\n/);
  assert.match(table.stdout, /\nnode-role\.kubernetes\.io\/control-plane\s+role\n/);
});

test('a missing file exits 66 with one line saying how to get the YAML', () => {
  const run = cli(['--cluster', join(dir, 'missing.yaml'), '--instance-group', highMemory]);
  assert.equal(run.status, 66);
  assert.match(
    run.stderr,
    /^kops-controller: cannot read --cluster .*missing\.yaml: no such file; export it with `kops get cluster -o yaml`/,
  );
  assert.equal(run.stderr.trim().split('\n').length, 1);
});

test('an invalid instance group exits 65 naming the file and field', async () => {
  const bad = join(dir, 'bad-ig.yaml');
  await writeFile(bad, (await readFile(highMemory, 'utf8')).replace('role: Node', 'role: Worker'));
  const run = cli(['--cluster', awsCluster, '--instance-group', bad, '-o', 'json']);
  assert.equal(run.status, 65);
  assert.match(run.stderr, /bad-ig\.yaml: spec\.role: unknown role "Worker"/);
  assert.equal(run.stdout, '');
});

test('both files are required', () => {
  const run = cli(['--cluster', awsCluster]);
  assert.equal(run.status, 2);
  assert.match(run.stderr, /required option '--instance-group <file>' not specified/);
});
