/**
 * `kops-controller join` end to end, as a real process: discovery and issuance from the real
 * bootstrap server, which uses the simulated API server for bootstrap tokens, Nodes and its queue;
 * the resulting kubeconfig is then used with the real kubectl.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { CoreV1Api } from '@kubernetes/client-node';
import type { Command } from 'commander';
import { Registry } from 'prom-client';
import { nodeFileNames } from '../agent/node-files.ts';
import {
  clusterInfoHandler,
  renderClusterInfoKubeconfig,
  signedClusterInfo,
} from '../bootstrap/discovery.ts';
import { awsPolicy } from '../bootstrap/policies/aws.ts';
import { bootstrapTokenPolicy } from '../bootstrap/policies/bootstrap-token.ts';
import { queuePolicy } from '../bootstrap/policies/queue.ts';
import { bootstrapSignerName } from '../bootstrap/queue.ts';
import { MemoryReplayGuard } from '../bootstrap/replay-guard.ts';
import { type RunningBootstrap, startBootstrapServer } from '../bootstrap/server.ts';
import { apiTokenSource, newBootstrapToken, TokenValidator, tokenSecretOf } from '../bootstrap/tokens.ts';
import { createAwsClients } from '../cloud/aws/clients.ts';
import { AwsNodeIdentifier } from '../cloud/aws/identify.ts';
import { parseConfig } from '../config/loader.ts';
import { exitCodeOf } from '../errors.ts';
import { bundlePem, createCa } from '../pki/ca.ts';
import { pinOfCertificatePem } from '../pki/pin.ts';
import { type KubeObject, type SimApiServer, startApiServer } from '../sim/apiserver/index.ts';
import { startAwsSimulator } from '../sim/aws/server.ts';
import { opensslText } from '../testing/openssl.ts';
import { toolPath } from '../testing/tools.ts';
import { buildProgram, errorLine } from './main.ts';

const run = promisify(execFile);
const mainPath = new URL('./main.ts', import.meta.url).pathname;

const ca = createCa();
const caPem = bundlePem(ca);
const token = newBootstrapToken();
const tokenText = `${token.id}.${token.secret}`;
/** Signs discovery but may not authenticate: discovery passes, the bootstrap-token policy denies. */
const signingOnly = newBootstrapToken({ usages: ['signing'] });
let sim: SimApiServer;
let boot: RunningBootstrap;
let signer: { stop: AbortController; done: Promise<void> };
let dir: string;
let adminKubeconfig: string;
let caFile: string;

interface Outcome {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs the command in this process (the servers keep serving); a failure is an outcome to check. */
async function cli(...args: string[]): Promise<Outcome> {
  const program = await buildProgram();
  let stdout = '';
  let stderr = '';
  const capture = (command: Command): void => {
    command.configureOutput({ writeOut: (text) => (stdout += text), writeErr: (text) => (stderr += text) });
    for (const sub of command.commands) capture(sub);
  };
  capture(program);
  try {
    await program.parseAsync(['-v', '0', ...args], { from: 'user' });
    return { code: 0, stdout, stderr };
  } catch (err) {
    return { code: exitCodeOf(err), stdout, stderr: `${stderr}kops-controller: ${errorLine(err)}\n` };
  }
}

/** Runs the real program in a child process, for what only a process shows: its exit code and output. */
async function program(...args: string[]): Promise<Outcome> {
  try {
    const { stdout, stderr } = await run(process.execPath, [mainPath, '-v', '0', ...args], {
      encoding: 'utf8',
    });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const failed = err as { code: number; stdout: string; stderr: string };
    return { code: failed.code, stdout: failed.stdout, stderr: failed.stderr };
  }
}

function joinArgs(nodeName: string, ...extra: string[]): string[] {
  return [
    'join',
    '--server',
    boot.server.url,
    '--node-name',
    nodeName,
    '--dir',
    join(dir, nodeName),
    ...extra,
  ];
}

function kubectl(kubeconfig: string, ...args: string[]): Promise<{ stdout: string }> {
  return run(toolPath('kubectl'), ['--kubeconfig', kubeconfig, ...args], { encoding: 'utf8' });
}

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'kops-join-cli-'));
  sim = await startApiServer({ clientCAs: [caPem] });
  adminKubeconfig = join(dir, 'admin.kubeconfig');
  await writeFile(adminKubeconfig, sim.kubeconfig(), { mode: 0o600 });
  caFile = join(dir, 'ca.crt');
  await writeFile(caFile, caPem);
  sim.store.create(tokenSecretOf(token) as KubeObject);
  sim.store.create(tokenSecretOf(signingOnly) as KubeObject);
  const tokens = apiTokenSource(sim.kubeConfig().makeApiClient(CoreV1Api));
  // The API server's own CA is in the bundle too: in this test it is not the cluster CA, as in kops.
  const kubeconfig = renderClusterInfoKubeconfig({
    servers: [sim.url],
    caBundlePem: caPem + sim.caCertificate,
  });
  boot = await startBootstrapServer(
    parseConfig({ clusterName: 'c.example.com', cloud: 'metal', server: {} }),
    {
      kubeConfig: sim.kubeConfig(),
      policies: [bootstrapTokenPolicy({ validator: new TokenValidator(tokens) }), queuePolicy()],
      ca,
      listen: '127.0.0.1:0',
      apiServer: sim.url,
      serverNames: { ipAddresses: ['127.0.0.1'] },
      clusterInfoHandler: clusterInfoHandler(() => signedClusterInfo(kubeconfig, tokens, new Date())),
      registry: new Registry(),
    },
  );
  const stop = new AbortController();
  signer = { stop, done: boot.signer.start(stop.signal) };
  while (!boot.queue.hasSynced()) await new Promise((resolve) => setTimeout(resolve, 10));
});

after(async () => {
  signer.stop.abort();
  await signer.done;
  await boot.close();
  await sim.close();
  await rm(dir, { recursive: true, force: true });
});

describe('kops-controller join against the bootstrap server', () => {
  test('with a CA pin and a bootstrap token: joins, and the kubeconfig authenticates as system:node:<name>', async () => {
    const outcome = await cli(
      ...joinArgs('node-t', '--ca-pin', pinOfCertificatePem(caPem), '--token', tokenText, '-o', 'json'),
    );
    assert.equal(outcome.code, 0, outcome.stderr);
    const result = JSON.parse(outcome.stdout);
    assert.equal(result.nodeName, 'node-t');
    assert.equal(result.apiServer, sim.url);
    assert.equal(result.waitedForApproval, false);
    const kubeconfig = join(dir, 'node-t', nodeFileNames.kubeconfig);
    const node = JSON.stringify({ apiVersion: 'v1', kind: 'Node', metadata: { name: 'node-t' } });
    await writeFile(join(dir, 'node-t.json'), node);
    const created = await kubectl(kubeconfig, 'create', '-f', join(dir, 'node-t.json'), '-o', 'name');
    assert.equal(created.stdout.trim(), 'node/node-t');
    await assert.rejects(
      kubectl(kubeconfig, 'delete', 'node', 'some-other-node'),
      (err: { stderr: string }) => {
        assert.match(err.stderr, /User "system:node:node-t" cannot delete resource "nodes"/);
        return true;
      },
    );
  });

  test('without proof: waits while queued, then finishes once an admin runs kubectl certificate approve', async () => {
    const joining = cli(...joinArgs('node-q', '--ca-file', caFile));
    let name: string | undefined;
    for (let i = 0; i < 1500 && !name; i++) {
      name = sim.store
        .list('certificatesigningrequests')
        .find((csr) => (csr['spec'] as { signerName?: string }).signerName === bootstrapSignerName)
        ?.metadata.name;
      if (!name) await new Promise((resolve) => setTimeout(resolve, 10));
    }
    assert.ok(name, 'the request was queued as a CSR');
    await kubectl(adminKubeconfig, 'certificate', 'approve', name);
    const outcome = await joining;
    assert.equal(outcome.code, 0, outcome.stderr);
    assert.match(outcome.stderr, /waiting for approval/);
    assert.match(outcome.stdout, /^NODE +INSTANCE GROUP +API SERVER +KUBECONFIG\nnode-q /);
    assert.deepEqual(
      (await readdir(join(dir, 'node-q'))).sort(),
      [
        nodeFileNames.caBundle,
        nodeFileNames.clientCertificate,
        nodeFileNames.clientKey,
        nodeFileNames.kubeconfig,
      ].sort(),
    );
  });

  test('wrong CA pin: refused before anything is sent, exit 77, nothing written', async () => {
    const outcome = await cli(...joinArgs('node-p', '--ca-pin', pinOfCertificatePem(bundlePem(createCa()))));
    assert.equal(outcome.code, 77);
    assert.match(outcome.stderr, /^kops-controller: none of the CA certificates from .* matches --ca-pin/m);
    await assert.rejects(readdir(join(dir, 'node-p')), { code: 'ENOENT' });
  });

  test('denial: one line with the policy’s reason, exit 77, nothing written', async () => {
    const pin = pinOfCertificatePem(caPem);
    const outcome = await program(
      ...joinArgs('node-d', '--ca-pin', pin, '--token', `${signingOnly.id}.${signingOnly.secret}`),
    );
    assert.equal(outcome.code, 77);
    assert.equal(
      outcome.stderr,
      `kops-controller: the bootstrap request was denied: bootstrap token ${signingOnly.id} is unknown, expired or its secret is wrong\n`,
    );
    assert.deepEqual(await readdir(join(dir, 'node-d')), []);
  });
});

describe('kops-controller join --cloud aws', () => {
  test('proves identity with the instance profile: the verified instance id, group and addresses', async () => {
    const clusterName = 'c.example.com';
    const instanceId = 'i-0123456789abcdef0';
    const aws = await startAwsSimulator({ throttling: false });
    const clients = await createAwsClients({
      region: aws.region,
      endpoint: aws.endpoint,
      credentials: aws.credentials,
    });
    let awsBoot: RunningBootstrap | undefined;
    try {
      aws.ec2.addInstances([
        {
          id: instanceId,
          zone: `${aws.region}a`,
          cluster: clusterName,
          instanceGroup: 'nodes',
          privateIp: '10.1.2.3',
        },
      ]);
      const session = aws.sts.addInstanceProfileSession(`nodes.${clusterName}`, instanceId);
      awsBoot = await startBootstrapServer(parseConfig({ clusterName, cloud: 'aws', server: {} }), {
        kubeConfig: sim.kubeConfig(),
        policies: [
          awsPolicy({
            account: aws.account,
            partition: 'aws',
            region: aws.region,
            nodesRoles: [`nodes.${clusterName}`],
            instances: new AwsNodeIdentifier({ ec2: clients.ec2, clusterName }),
            replayGuard: new MemoryReplayGuard(),
            stsEndpoint: aws.endpoint,
          }),
        ],
        ca,
        listen: '127.0.0.1:0',
        apiServer: sim.url,
        serverNames: { ipAddresses: ['127.0.0.1'] },
        clusterInfoHandler: clusterInfoHandler(() => ({
          apiVersion: 'v1',
          kind: 'ConfigMap',
          metadata: { name: 'cluster-info', namespace: 'kube-public' },
          data: { kubeconfig: renderClusterInfoKubeconfig({ servers: [sim.url], caBundlePem: caPem }) },
        })),
        registry: new Registry(),
      });
      const nodeDir = join(dir, 'aws-node');
      // The SDK's credential chain reads the instance profile session from the environment here
      // (on an instance it comes from IMDS).
      Object.assign(process.env, {
        AWS_ACCESS_KEY_ID: session.accessKeyId,
        AWS_SECRET_ACCESS_KEY: session.secretAccessKey,
        AWS_SESSION_TOKEN: session.sessionToken ?? '',
      });
      const args = ['join', '--server', awsBoot.server.url, '--ca-file', caFile, '--cloud', 'aws'];
      const outcome = await cli(
        ...args,
        ...['--aws-region', aws.region, '--node-name', instanceId, '--dir', nodeDir, '-o', 'json'],
      );
      assert.equal(outcome.code, 0, outcome.stderr);
      const result = JSON.parse(outcome.stdout);
      assert.equal(result.nodeName, instanceId);
      assert.equal(result.instanceGroup, 'nodes');
      const serving = await readFile(join(nodeDir, nodeFileNames.serverCertificate), 'utf8');
      assert.match(opensslText(serving), /IP Address:10\.1\.2\.3/);
      assert.match(
        opensslText(serving),
        /Subject: O ?= ?system:nodes, CN ?= ?system:node:i-0123456789abcdef0/,
      );

      // Another instance's name is refused: the certificate names only what EC2 verified.
      const other = await cli(
        ...args,
        ...[
          '--aws-region',
          aws.region,
          '--node-name',
          'i-0fffffffffffffff0',
          '--dir',
          join(dir, 'aws-other'),
        ],
      );
      assert.equal(other.code, 77, other.stderr);
      assert.match(other.stderr, /denied/);
    } finally {
      for (const key of ['AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'AWS_SESSION_TOKEN'])
        delete process.env[key];
      await awsBoot?.close();
      clients.destroy();
      await aws.close();
    }
  });
});
