/**
 * `kops-controller dev --cloud <c>` end to end on the six server clouds: the simulated cloud seeded
 * with a kops cluster, the controller with the cloud's provider and its own approval policy pointed
 * at the simulator, new servers joining with the cloud's proof from their metadata service (and, on
 * the callback clouds, answering the callback on their own address), and the NodeController
 * labelling every node from its instance group. Plus what the cloud's policy refuses.
 */
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { DeniedError } from '../agent/bootstrap-client.ts';
import { join as joinCluster } from '../agent/join.ts';
import { nodeFilePath } from '../agent/node-files.ts';
import { InvalidInputError } from '../errors.ts';
import {
  type ServerCloud,
  type ServerCloudDevCluster,
  startServerCloudDevCluster,
} from '../sim/dev-clouds.ts';
import { devBanner } from '../sim/dev-run.ts';
import { startJoiningNodes } from '../sim/joining-nodes.ts';
import { runCli } from '../testing/cli.ts';
import { waitForGroupLabels } from '../testing/kubectl.ts';
import { controllerBannerLines, type DevController, startDevController } from './dev-controller.ts';

const execFileAsync = promisify(execFile);

/**
 * Per cloud: the banner's line; the metadata-service call each joining node makes for its proof; the
 * cloud API reads of the verifier, which asks the cloud about the server the proof names; and where
 * the controller's credential is a token the simulator issues, the call that issues it.
 */
const clouds: Record<ServerCloud, { banner: RegExp; metadata: string; api: string[]; token?: string }> = {
  hetzner: {
    banner: /Hetzner Cloud +http:\/\/127\.0\.0\.1:\d+\/v1 /,
    metadata: 'metadata',
    api: ['servers.get', 'servers.list'],
  },
  digitalocean: {
    banner: /DigitalOcean +http:\/\/127\.0\.0\.1:\d+\/v2 /,
    metadata: 'metadata',
    api: ['droplets.get', 'droplets.list'],
  },
  linode: {
    banner: /Linode +http:\/\/127\.0\.0\.1:\d+ /,
    metadata: 'metadata.instance',
    api: ['linode.instances.get', 'linode.instances.list'],
  },
  openstack: {
    banner: /OpenStack +http:\/\/127\.0\.0\.1:\d+\S* +\(Keystone/,
    metadata: 'metadata',
    api: ['servers.get', 'servers.list'],
  },
  scaleway: {
    banner: /Scaleway +http:\/\/127\.0\.0\.1:\d+ /,
    metadata: 'metadata',
    api: ['servers.get', 'servers.list', 'ips.list'],
  },
  azure: {
    banner: /Azure +https:\/\/127\.0\.0\.1:\d+ /,
    metadata: 'imds.attested',
    api: ['virtualMachineScaleSetVMs.get', 'virtualMachineScaleSetVMs.list'],
    token: 'imds.token',
  },
};

for (const [cloud, expectations] of Object.entries(clouds) as [ServerCloud, (typeof clouds)[ServerCloud]][]) {
  describe(`kops-controller dev --cloud ${cloud}`, () => {
    let dir: string;
    let cluster: ServerCloudDevCluster;
    let controller: DevController;
    before(async () => {
      dir = await mkdtemp(join(tmpdir(), `dev-${cloud}-`));
      cluster = await startServerCloudDevCluster(cloud, { stateDir: dir });
      controller = await startDevController(cluster, { bootstrapPolicy: cloud });
    });
    after(async () => {
      await controller?.stop();
      await cluster?.close();
      await rm(dir, { recursive: true, force: true });
    });

    test('new servers join with the cloud’s proof, and every node is labelled from its instance group', async () => {
      const bootstrap = controller.bootstrap;
      assert.ok(bootstrap);
      assert.match(devBanner(cluster, controllerBannerLines(controller)), expectations.banner);
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
      const group = `nodes-${cluster.zone}`;
      const expected = [
        ...[...cluster.nodesByGroup].flatMap(([ig, nodes]) => nodes.map((n) => [n, ig] as const)),
        ...joining.nodes.map((n) => [n, group] as const),
      ];
      const { output, unlabelled } = await waitForGroupLabels(cluster.api.kubeconfigPath, expected);
      assert.deepEqual(unlabelled, [], output);
      // Each machine read its proof from its own metadata service; the verifier asked the cloud.
      assert.ok(cluster.sim.count(expectations.metadata) >= 2, `${expectations.metadata} calls`);
      const apiReads = expectations.api.reduce((sum, operation) => sum + cluster.sim.count(operation), 0);
      assert.ok(apiReads > 0, `the verifier read ${expectations.api.join(' or ')}`);
      // The serving certificate names the address the cloud reports, where the callback was answered.
      const first = joining.nodes[0] as string;
      const serving = new X509Certificate(
        await readFile(nodeFilePath(join(dir, 'nodes', first), 'serverCertificate')),
      );
      assert.match(serving.subjectAltName ?? '', /IP Address:127\.(?!0\.0\.1\b)\d+\.\d+\.\d+/);
    });

    test('validate in the environment dev writes reaches only the simulators', async () => {
      for (const [name, value] of Object.entries(cluster.env)) {
        if (/^[a-z]+:\/\//.test(value)) {
          assert.match(new URL(value).hostname, /^(127\.0\.0\.1|localhost|\[::1\])$/, `${name}=${value}`);
        }
      }
      const apiReads = () => expectations.api.reduce((sum, op) => sum + cluster.sim.count(op), 0);
      const tokens = () => (expectations.token ? cluster.sim.count(expectations.token) : 0);
      const before = { api: apiReads(), tokens: tokens() };
      // A clean environment: only what `.kops-dev/env` sets, a HOME without cloud credentials, and a
      // proxy that refuses anything not on loopback, so a request to the real cloud would fail.
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
      assert.ok(apiReads() > before.api, 'the cloud groups came from the simulated cloud API');
      if (expectations.token) assert.ok(tokens() > before.tokens, 'the credential came from the simulator');
    });

    test(
      cloud === 'openstack'
        ? 'a server’s id sent from another address is denied, and nothing is written'
        : 'a server’s id from a machine that answers no callback is denied, and nothing is written',
      async () => {
        const bootstrap = controller.bootstrap;
        assert.ok(bootstrap);
        // A real server of the cluster; the request names it but comes from elsewhere (127.0.0.1),
        // or brings no challenge server to prove it runs on the server's address.
        const server = cluster.launch(`nodes-${cluster.zone}`);
        const out = join(dir, 'impostor');
        await assert.rejects(
          joinCluster({
            server: bootstrap.url,
            // What discovery answers with the pin: the cluster CA.
            caBundlePem: cluster.api.server.caCertificate,
            nodeName: server.name,
            dir: out,
            proof: server.proof,
            timeoutMs: 30_000,
            retry: { initialMs: 100, maxMs: 500 },
          }),
          (err: unknown) =>
            err instanceof DeniedError &&
            (cloud === 'openstack'
              ? /not an address of server/.test(err.message)
              : /callback/.test(err.message)),
        );
        await assert.rejects(readFile(nodeFilePath(out, 'kubeconfig')), { code: 'ENOENT' });
      },
    );
  });
}

test('dev refuses another cloud’s policy before anything starts', async () => {
  const stateDir = join(tmpdir(), `dev-refused-${process.pid}`);
  await assert.rejects(
    runCli('dev', '--cloud', 'hetzner', '--policy', 'azure', '--state-dir', stateDir),
    (err: unknown) =>
      err instanceof InvalidInputError && /--policy azure needs --cloud azure/.test(err.message),
  );
  await assert.rejects(readFile(join(stateDir, 'lock')), { code: 'ENOENT' });
});

test('the dev command on a server cloud: its machines join with the cloud’s proof and the callback, and get their labels', async () => {
  const stateDir = await mkdtemp(join(tmpdir(), 'dev-cli-hetzner-'));
  const dev = spawn(
    process.execPath,
    [
      join(import.meta.dirname, 'main.ts'),
      'dev',
      '--cloud',
      'hetzner',
      '--state-dir',
      stateDir,
      '--joining-nodes',
      '2',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let stdout = '';
  let stderr = '';
  dev.stdout.on('data', (chunk: Buffer) => (stdout += chunk));
  const exited = new Promise<number | null>((resolve) => dev.once('exit', resolve));
  try {
    // Bounded: the joining machines report each change on standard error until all have joined.
    const joined = await new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), 90_000);
      dev.stderr.on('data', (chunk: Buffer) => {
        stderr += chunk;
        if (/joining nodes \(policy hetzner\): 2\/2 joined, 0 waiting for approval, 0 failed/.test(stderr)) {
          clearTimeout(timer);
          resolve(true);
        }
      });
      void exited.then(() => resolve(false));
    });
    assert.ok(joined, stderr);
    assert.match(stdout, /Hetzner Cloud +http:\/\/127\.0\.0\.1:\d+\/v1 /);
    // kops names servers `<group>-<n>`: two seeded, then the two that joined.
    const expected = ['nodes-fsn1-0', 'nodes-fsn1-1', 'nodes-fsn1-2', 'nodes-fsn1-3'].map(
      (node) => [node, 'nodes-fsn1'] as const,
    );
    const { output, unlabelled } = await waitForGroupLabels(join(stateDir, 'kubeconfig'), expected);
    assert.deepEqual(unlabelled, [], output);
    dev.kill('SIGINT');
    assert.equal(await exited, 0, stderr);
  } finally {
    dev.kill('SIGKILL');
    await rm(stateDir, { recursive: true, force: true });
  }
});
