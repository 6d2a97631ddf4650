/**
 * `kops-controller join` end to end, as a real process: discovery and issuance from the real
 * bootstrap server, which uses the simulated API server for bootstrap tokens, Nodes and its queue;
 * the resulting kubeconfig is then used with the real kubectl.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { promisify } from 'node:util';
import { CoreV1Api } from '@kubernetes/client-node';
import type { Command } from 'commander';
import { Registry } from 'prom-client';
import { type FakeImds, startFakeImds } from '../agent/imds.test-support.ts';
import { nodeFileNames } from '../agent/node-files.ts';
import {
  type ProxiedRequest,
  type ProxyReply,
  startTlsEndpoint,
  startTlsProxy,
  type TlsProxy,
} from '../agent/tls-proxy.test-support.ts';
import { buildClusterInfo, clusterInfoHandler, signedClusterInfo } from '../bootstrap/discovery.ts';
import { awsPolicy } from '../bootstrap/policies/aws.ts';
import { bootstrapTokenPolicy } from '../bootstrap/policies/bootstrap-token.ts';
import { insecureAlwaysApprovePolicy } from '../bootstrap/policies/insecure-always-approve.ts';
import { queuePolicy } from '../bootstrap/policies/queue.ts';
import { bootstrapSignerName } from '../bootstrap/queue.ts';
import { apiTokenSource, newBootstrapToken, TokenValidator, tokenSecretOf } from '../bootstrap/tokens.ts';
import { createAwsClients } from '../cloud/aws/clients.ts';
import { AwsNodeIdentifier } from '../cloud/aws/identify.ts';
import { parseConfig } from '../config/loader.ts';
import { exitCodeOf } from '../errors.ts';
import { bundlePem, type CertificateAuthority, createCa } from '../pki/ca.ts';
import { generateKey } from '../pki/keys.ts';
import { pinOfCertificatePem } from '../pki/pin.ts';
import { issueCertificate, publicKeyRequest } from '../pki/profiles.ts';
import { type ClusterInfo, renderClusterInfoKubeconfig } from '../protocol/cluster-info.ts';
import { type KubeObject, type SimApiServer, startApiServer } from '../sim/apiserver/index.ts';
import { startAwsSimulator } from '../sim/aws/server.ts';
import { opensslText } from '../testing/openssl.ts';
import { toolPath } from '../testing/tools.ts';
import { type RunningBootstrap, startBootstrapServer } from './bootstrap-server.ts';
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
/** The cluster-info kubeconfig every server here publishes: the API server and both CAs. */
let clusterKubeconfig: string;
/** `--ca-pin` for both CAs of the cluster-info bundle: the cluster CA and the API server's. */
let pins: string[];

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
  await writeFile(caFile, `${caPem}${sim.caCertificate}\n`);
  pins = ['--ca-pin', pinOfCertificatePem(caPem), '--ca-pin', pinOfCertificatePem(sim.caCertificate)];
  sim.store.create(tokenSecretOf(token) as KubeObject);
  sim.store.create(tokenSecretOf(signingOnly) as KubeObject);
  const tokens = apiTokenSource(sim.kubeConfig().makeApiClient(CoreV1Api));
  // The API server's own CA is in the bundle too: in this test it is not the cluster CA, as in kops.
  clusterKubeconfig = renderClusterInfoKubeconfig({
    servers: [sim.url],
    caBundlePem: `${caPem}${sim.caCertificate}\n`,
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
      clusterInfoHandler: clusterInfoHandler(() => signedClusterInfo(clusterKubeconfig, tokens, new Date())),
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
    const outcome = await cli(...joinArgs('node-t', ...pins, '--token', tokenText, '-o', 'json'));
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
    // The line docs/join.md shows: the queue policy's reason, and the name to approve.
    assert.match(
      outcome.stderr,
      /^waiting for approval \(\d+s\): the node name node-q is claimed, not verified: a human must check that 127\.0\.0\.1 really is node-q before approving; queued as kops-bootstrap-[0-9a-f]{40}$/m,
    );
    assert.match(outcome.stdout, /^NODE +INSTANCE GROUP +API SERVER +KUBECONFIG\nnode-q /);
    assert.deepEqual(
      (await readdir(join(dir, 'node-q'))).filter((name) => !name.startsWith('..')).sort(),
      [
        nodeFileNames.caBundle,
        nodeFileNames.clientCertificate,
        nodeFileNames.clientKey,
        nodeFileNames.kubeconfig,
      ].sort(),
    );
  });

  test('a malformed --ca-pin: exit 65 at once, the line names the flag and the value', async () => {
    const outcome = await cli(...joinArgs('node-badpin', '--ca-pin', 'sha256:zz'));
    assert.equal(outcome.code, 65, outcome.stderr);
    assert.match(
      outcome.stderr,
      /^kops-controller: --ca-pin sha256:zz: invalid CA pin "sha256:zz": expected /m,
    );
  });

  test('a malformed token: exit 65 at once, the line names --token (or the variable it came from), not the value', async () => {
    const flag = await cli(...joinArgs('node-badtoken', ...pins, '--token', 'abc'));
    assert.equal(flag.code, 65, flag.stderr);
    assert.match(
      flag.stderr,
      /^kops-controller: --token: the bootstrap token is not in the kubeadm format /m,
    );
    process.env['KOPS_CONTROLLER_JOIN_TOKEN'] = 'abcdef.NOT-A-SECRET';
    try {
      const variable = await cli(...joinArgs('node-badtoken', ...pins));
      assert.equal(variable.code, 65, variable.stderr);
      assert.match(
        variable.stderr,
        /^kops-controller: \$KOPS_CONTROLLER_JOIN_TOKEN: the bootstrap token is not in the kubeadm format /m,
      );
      assert.ok(!variable.stderr.includes('NOT-A-SECRET'));
    } finally {
      delete process.env['KOPS_CONTROLLER_JOIN_TOKEN'];
    }
    assert.deepEqual(await filesIn(join(dir, 'node-badtoken')), []);
  });

  test('wrong CA pin: refused before anything is sent, exit 77, nothing written', async () => {
    const outcome = await cli(...joinArgs('node-p', '--ca-pin', pinOfCertificatePem(bundlePem(createCa()))));
    assert.equal(outcome.code, 77);
    assert.match(outcome.stderr, /^kops-controller: none of the CA certificates from .* matches --ca-pin/m);
    await assert.rejects(readdir(join(dir, 'node-p')), { code: 'ENOENT' });
  });

  test('a CA in cluster-info that is not pinned: exit 77, the line names it and its pin, nothing written', async () => {
    const outcome = await cli(
      ...joinArgs('node-u', '--ca-pin', pinOfCertificatePem(caPem), '--token', tokenText),
    );
    assert.equal(outcome.code, 77, outcome.stderr);
    assert.equal(outcome.stderr.split('\n').length, 2, 'one line');
    const simCa = new X509Certificate(sim.caCertificate).subject;
    assert.ok(
      outcome.stderr.includes(`${simCa} (${pinOfCertificatePem(sim.caCertificate)})`),
      outcome.stderr,
    );
    assert.deepEqual(await filesIn(join(dir, 'node-u')), []);
  });

  test('a wrong --server path: exit 66 at once, the line names the URL, the status and the reason', async () => {
    const outcome = await cli(
      ...['join', '--server', `${boot.server.url}/wrong`, ...pins, '--node-name', 'node-w'],
      ...['--dir', join(dir, 'node-w')],
    );
    assert.equal(outcome.code, 66, outcome.stderr);
    assert.equal(
      outcome.stderr,
      `kops-controller: GET ${boot.server.url}/wrong/cluster-info answered 404 Not Found: no such endpoint ` +
        '/wrong/cluster-info; see ' +
        'docs/bootstrap-api.md (not-found); check the URL given to --server\n',
    );
  });

  test('denial: one line with the policy’s reason, exit 77, nothing written', async () => {
    const outcome = await program(
      ...joinArgs('node-d', ...pins, '--token', `${signingOnly.id}.${signingOnly.secret}`),
    );
    assert.equal(outcome.code, 77);
    assert.equal(
      outcome.stderr,
      `kops-controller: the bootstrap request was denied: bootstrap token ${signingOnly.id} is unknown, expired or its secret is wrong\n`,
    );
    assert.deepEqual(await readdir(join(dir, 'node-d')), []);
  });
});

/** The files in a directory; none when it was never created. */
async function filesIn(path: string): Promise<string[]> {
  try {
    return await readdir(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
}

/** A serving certificate for 127.0.0.1 from `issuer`, as a TLS server takes it. */
function loopbackCertificate(issuer: CertificateAuthority): { cert: string; key: string } {
  const key = generateKey();
  const cert = issueCertificate(issuer, 'kops-controller', publicKeyRequest(key), {
    name: 'proxy.internal',
    ipAddresses: ['127.0.0.1'],
  });
  return { cert: cert.pem, key: key.export({ format: 'pem', type: 'pkcs8' }) as string };
}

describe('kops-controller join through a TLS man in the middle (no token: every policy that admits without one)', () => {
  const attackerCa = createCa({ name: 'attacker-ca' });
  const attackerPem = bundlePem(attackerCa);
  let insecureBoot: RunningBootstrap;
  let attackerApi: Awaited<ReturnType<typeof startTlsEndpoint>>;
  const proxies: TlsProxy[] = [];
  /** What the genuine server publishes; one test makes it name the attacker (a hijacked DNS name). */
  let published = '';

  before(async () => {
    published = clusterKubeconfig;
    // The genuine cluster admits any node (insecure-always-approve stands for aws, gce and the queue,
    // which admit without a token too): only the pins stand between the node and the attacker.
    insecureBoot = await startBootstrapServer(
      parseConfig({ clusterName: 'c.example.com', cloud: 'metal', server: {} }),
      {
        kubeConfig: sim.kubeConfig(),
        policies: [insecureAlwaysApprovePolicy()],
        ca,
        listen: '127.0.0.1:0',
        apiServer: sim.url,
        serverNames: { ipAddresses: ['127.0.0.1'] },
        clusterInfoHandler: clusterInfoHandler(() => buildClusterInfo(published, [], new Date())),
        registry: new Registry(),
      },
    );
    attackerApi = await startTlsEndpoint(loopbackCertificate(attackerCa));
  });
  after(async () => {
    for (const proxy of proxies) await proxy.close();
    await attackerApi.close();
    await insecureBoot.close();
  });

  /** Joins through a man in the middle that rewrites cluster-info and forwards everything else. */
  const joinThrough = async (
    nodeName: string,
    rewrite: (info: ClusterInfo) => ClusterInfo,
    connection?: (index: number) => 'relay' | 'terminate',
  ) => {
    const proxy = await startTlsProxy({
      upstream: insecureBoot.server.url,
      certificate: loopbackCertificate(attackerCa),
      rewrite,
      ...(connection ? { connection } : {}),
    });
    proxies.push(proxy);
    const args = ['join', '--server', proxy.url, ...pins, '--node-name', nodeName];
    return cli(...args, '--dir', join(dir, nodeName), '--timeout', '10s');
  };

  const cases: {
    name: string;
    rewrite: (info: ClusterInfo) => ClusterInfo;
    connection?: (index: number) => 'relay' | 'terminate';
    line: RegExp;
  }[] = [
    {
      name: 'an extra CA appended to the genuine bundle',
      rewrite: (info) => ({ ...info, caBundlePem: info.caBundlePem + attackerPem }),
      line: /is not pinned: CN=attacker-ca \(sha256:[0-9a-f]{64}\)/,
    },
    {
      name: "the attacker's API server, with a certificate from the attacker's CA appended to the bundle",
      rewrite: (info) => ({ servers: [attackerApi.url], caBundlePem: info.caBundlePem + attackerPem }),
      line: /is not pinned: CN=attacker-ca/,
    },
    {
      name: 'the CA replaced by the attacker’s',
      rewrite: (info) => ({ ...info, caBundlePem: attackerPem }),
      line: /none of the CA certificates from .* matches --ca-pin/,
    },
    {
      name: 'the genuine bundle with a foreign server URL',
      rewrite: (info) => ({ ...info, servers: [attackerApi.url] }),
      line: /did not present a certificate from the cluster CA/,
    },
    {
      name: 'first fetch through the attacker, second relayed to the genuine server',
      rewrite: (info) => ({ ...info, servers: [attackerApi.url] }),
      connection: (index) => (index === 0 ? 'terminate' : 'relay'),
      line: /changed between the unverified and the verified fetch/,
    },
    {
      name: 'discovery relayed untouched, the bootstrap API calls through the attacker',
      rewrite: (info) => info,
      connection: (index) => (index < 2 ? 'relay' : 'terminate'),
      line: /the bootstrap server https:\/\/127\.0\.0\.1:\d+ is not trusted by the cluster CA/,
    },
  ];
  cases.forEach(({ name, rewrite, connection, line }, i) => {
    test(`${name}: exit 77 with one line, nothing written`, async () => {
      const nodeName = `mitm-${i}`;
      const outcome = await joinThrough(nodeName, rewrite, connection);
      assert.equal(outcome.code, 77, outcome.stderr);
      assert.match(outcome.stderr, line);
      assert.equal(outcome.stderr.split('\n').length, 2, `one line: ${outcome.stderr}`);
      assert.deepEqual(await filesIn(join(dir, nodeName)), []);
      assert.equal(attackerApi.connections(), 0, "the attacker's API server is never contacted");
    });
  });

  test('the genuine cluster-info names an API server URL the attacker answers (hijacked DNS): exit 77, nothing written', async () => {
    published = renderClusterInfoKubeconfig({
      servers: [attackerApi.url],
      caBundlePem: `${caPem}${sim.caCertificate}\n`,
    });
    try {
      const outcome = await cli(
        ...['join', '--server', insecureBoot.server.url, ...pins, '--node-name', 'mitm-dns'],
        ...['--dir', join(dir, 'mitm-dns')],
      );
      assert.equal(outcome.code, 77, outcome.stderr);
      assert.equal(
        outcome.stderr,
        `kops-controller: the API server ${attackerApi.url} did not present a certificate from a CA the node ` +
          'trusts (UNABLE_TO_VERIFY_LEAF_SIGNATURE): the node could never trust it; check the API server URL ' +
          'the cluster publishes, or someone else is answering for it\n',
      );
      assert.equal(attackerApi.connections(), 1, 'one TLS handshake, refused');
      assert.deepEqual(await filesIn(join(dir, 'mitm-dns')), []);
    } finally {
      published = clusterKubeconfig;
    }
  });

  test('without the man in the middle the same join succeeds (the cases above fail for the attack alone)', async () => {
    const outcome = await cli(
      ...['join', '--server', insecureBoot.server.url, ...pins, '--node-name', 'mitm-none'],
      ...['--dir', join(dir, 'mitm-none'), '-o', 'json'],
    );
    assert.equal(outcome.code, 0, outcome.stderr);
    assert.equal(JSON.parse(outcome.stdout).apiServer, sim.url);
  });
});

describe('kops-controller join: faults are retried, permanent answers end it at once', () => {
  const proxies: TlsProxy[] = [];
  after(async () => {
    for (const proxy of proxies) await proxy.close();
  });
  /** A load balancer in front of the bootstrap server, with a certificate from the cluster CA. */
  const balancer = async (intercept: (request: ProxiedRequest) => ProxyReply | undefined) => {
    const proxy = await startTlsProxy({
      upstream: boot.server.url,
      certificate: loopbackCertificate(ca),
      intercept,
    });
    proxies.push(proxy);
    return proxy;
  };
  const joinVia = (proxy: TlsProxy, nodeName: string, timeout: string) =>
    cli(
      ...['join', '--server', proxy.url, ...pins, '--token', tokenText, '--node-name', nodeName],
      ...['--dir', join(dir, nodeName), '--timeout', timeout],
    );

  const permanent = [
    { path: '/cluster-info', status: 400, code: 65 },
    { path: '/cluster-info', status: 401, code: 77 },
    { path: '/cluster-info', status: 403, code: 77 },
    { path: '/cluster-info', status: 404, code: 66 },
    { path: '/v1/certificates', status: 400, code: 65 },
    { path: '/v1/certificates', status: 404, code: 66 },
  ];
  for (const { path, status, code } of permanent) {
    test(`${status} on ${path} (not the bootstrap API's own JSON): exit ${code} at once, one line naming it`, async () => {
      const proxy = await balancer((request) =>
        request.path === path
          ? { status, body: `<html><body>${status} from a proxy</body></html>` }
          : undefined,
      );
      const nodeName = `permanent-${status}-${path.length}`;
      const outcome = await joinVia(proxy, nodeName, '3s');
      assert.equal(outcome.code, code, outcome.stderr);
      const method = path === '/cluster-info' ? 'GET' : 'POST';
      assert.match(
        outcome.stderr,
        new RegExp(`^kops-controller: ${method} ${proxy.url}${path} answered ${status} [A-Z]`),
      );
      assert.equal(outcome.stderr.split('\n').length, 2, `one line: ${outcome.stderr}`);
      assert.equal(proxy.requests.filter((r) => r.path === path).length, 1, 'not retried');
      assert.deepEqual(await filesIn(join(dir, nodeName)), []);
    });
  }

  test('--timeout is measured on the monotonic clock: a wall clock stepped 2 h ahead ends nothing early, and "gave up after" tells the time waited', async (t) => {
    // The wall clock is mocked (and still), and stepped as chrony steps it at boot: after discovery.
    t.mock.timers.enable({ apis: ['Date'], now: Date.now() });
    let stepped = false;
    const proxy = await balancer((request) => {
      if (request.path !== '/v1/certificates') return undefined;
      if (!stepped) t.mock.timers.setTime(Date.now() + 2 * 3_600_000);
      stepped = true;
      const unavailable = { error: { reason: 'unavailable', message: 'the signer is down' } };
      return {
        status: 503,
        body: JSON.stringify(unavailable),
        headers: { 'content-type': 'application/json' },
      };
    });
    const started = performance.now();
    const outcome = await joinVia(proxy, 'node-stepped', '3s');
    const waitedMs = performance.now() - started;
    assert.equal(outcome.code, 75, outcome.stderr);
    // Retried after 1-1.5 s (then 2-3 s would pass the 3 s): not given up at once, "after 7200s".
    assert.match(outcome.stderr, /^bootstrap request: retrying in [12]s: /m);
    const last = outcome.stderr.trimEnd().split('\n').at(-1) ?? '';
    const said = Number(/^kops-controller: bootstrap request: gave up after (\d+)s: /.exec(last)?.[1]);
    assert.ok(Math.abs(said - waitedMs / 1000) <= 1, `${last} after ${waitedMs} ms`);
  });

  test('--server with a path, behind a load balancer that routes that path to the controller: joins', async () => {
    const proxy = await startTlsProxy({
      upstream: boot.server.url,
      certificate: loopbackCertificate(ca),
      pathPrefix: '/kops',
    });
    proxies.push(proxy);
    const outcome = await cli(
      ...['join', '--server', `${proxy.url}/kops`, ...pins, '--token', tokenText, '--node-name', 'node-lb'],
      ...['--dir', join(dir, 'node-lb'), '-o', 'json'],
    );
    assert.equal(outcome.code, 0, outcome.stderr);
    assert.equal(JSON.parse(outcome.stdout).nodeName, 'node-lb');
    assert.deepEqual(
      proxy.requests.map((r) => `${r.method} ${r.path}`),
      ['GET /kops/cluster-info', 'GET /kops/cluster-info', 'POST /kops/v1/certificates'],
    );
  });

  test('503 with Retry-After on discovery and on the bootstrap API, then success: joins', async () => {
    const unavailable = { error: { reason: 'unavailable', message: 'the API server is not answering' } };
    const faults = new Map([
      ['/cluster-info', 2],
      ['/v1/certificates', 2],
    ]);
    const proxy = await balancer((request) => {
      const left = faults.get(request.path) ?? 0;
      if (left === 0) return undefined;
      faults.set(request.path, left - 1);
      return {
        status: 503,
        body: JSON.stringify(unavailable),
        headers: { 'content-type': 'application/json', 'retry-after': '1' },
      };
    });
    const outcome = await joinVia(proxy, 'node-503', '60s');
    assert.equal(outcome.code, 0, outcome.stderr);
    const retries = outcome.stderr.split('\n').filter((l) => l.includes('retrying in'));
    assert.deepEqual(
      retries.map((l) => l.replace(/: .*/, '')),
      ['discovery', 'discovery', 'bootstrap request', 'bootstrap request'],
    );
    // The longer of the server's 1 s and the backoff's first 1–1.5 s (rounded up when shown).
    assert.match(retries[0] ?? '', /retrying in [12]s: GET .*answered 503 .*not answering \(unavailable\)$/);
  });
});

describe('kops-controller join --cloud aws', () => {
  const clusterName = 'c.example.com';
  const instanceId = 'i-0123456789abcdef0';
  let aws: Awaited<ReturnType<typeof startAwsSimulator>>;
  let clients: Awaited<ReturnType<typeof createAwsClients>>;
  let awsBoot: RunningBootstrap;
  let session: { accessKeyId: string; secretAccessKey: string; sessionToken?: string };
  let imds: FakeImds;

  before(async () => {
    aws = await startAwsSimulator({ throttling: false });
    clients = await createAwsClients({
      region: aws.region,
      endpoint: aws.endpoint,
      credentials: aws.credentials,
    });
    aws.ec2.addInstances([
      {
        id: instanceId,
        zone: `${aws.region}a`,
        cluster: clusterName,
        instanceGroup: 'nodes',
        privateIp: '10.1.2.3',
      },
    ]);
    session = aws.sts.addInstanceProfileSession(`nodes.${clusterName}`, instanceId);
    imds = await startFakeImds({ instanceId, role: `nodes.${clusterName}`, session });
    awsBoot = await startBootstrapServer(parseConfig({ clusterName, cloud: 'aws', server: {} }), {
      kubeConfig: sim.kubeConfig(),
      policies: [
        awsPolicy({
          account: aws.account,
          partition: 'aws',
          region: aws.region,
          nodesRoles: [`nodes.${clusterName}`],
          instances: new AwsNodeIdentifier({ ec2: clients.ec2, clusterName }),
          stsEndpoint: aws.endpoint,
        }),
      ],
      ca,
      listen: '127.0.0.1:0',
      apiServer: sim.url,
      serverNames: { ipAddresses: ['127.0.0.1'] },
      clusterInfoHandler: clusterInfoHandler(() => buildClusterInfo(clusterKubeconfig, [], new Date())),
      registry: new Registry(),
    });
  });
  after(async () => {
    await awsBoot.close();
    await imds.close();
    clients.destroy();
    await aws.close();
  });

  /**
   * Runs `join --cloud aws` in this process with only `vars` of the AWS environment set (no shared
   * config or credentials files), so the machine's own AWS settings decide nothing; IMDS is the
   * loopback one unless `vars` says otherwise.
   */
  const awsJoin = (vars: Record<string, string>, ...args: string[]): Promise<Outcome> =>
    awsJoinIn(vars, ['--aws-region', aws.region], ...args);
  /** {@link awsJoin} with `regionArgs` for the region flag (none: the region is the environment's). */
  const awsJoinIn = async (
    vars: Record<string, string>,
    regionArgs: string[],
    ...args: string[]
  ): Promise<Outcome> => {
    const saved = Object.fromEntries(
      Object.keys(process.env)
        .filter((k) => k.startsWith('AWS_'))
        .map((k) => [k, process.env[k]]),
    );
    for (const key of Object.keys(saved)) delete process.env[key];
    Object.assign(process.env, {
      AWS_CONFIG_FILE: '/nonexistent/aws-config',
      AWS_SHARED_CREDENTIALS_FILE: '/nonexistent/aws-credentials',
      AWS_EC2_METADATA_SERVICE_ENDPOINT: imds.url,
      ...vars,
    });
    try {
      const base = ['join', '--server', awsBoot.server.url, '--ca-file', caFile, '--cloud', 'aws'];
      return await cli(...base, ...regionArgs, ...args);
    } finally {
      for (const key of Object.keys(process.env).filter((k) => k.startsWith('AWS_'))) delete process.env[key];
      Object.assign(process.env, saved);
    }
  };

  test('proves identity with the instance profile: the verified instance id, group and addresses', async () => {
    const nodeDir = join(dir, 'aws-node');
    // The SDK's credential chain reads the instance profile session from the environment here.
    const environment = {
      AWS_ACCESS_KEY_ID: session.accessKeyId,
      AWS_SECRET_ACCESS_KEY: session.secretAccessKey,
      AWS_SESSION_TOKEN: session.sessionToken ?? '',
    };
    const outcome = await awsJoin(environment, '--node-name', instanceId, '--dir', nodeDir, '-o', 'json');
    assert.equal(outcome.code, 0, outcome.stderr);
    const result = JSON.parse(outcome.stdout);
    assert.equal(result.nodeName, instanceId);
    assert.equal(result.instanceGroup, 'nodes');
    const serving = await readFile(join(nodeDir, nodeFileNames.serverCertificate), 'utf8');
    assert.match(opensslText(serving), /IP Address:10\.1\.2\.3/);
    assert.match(opensslText(serving), /Subject: O ?= ?system:nodes, CN ?= ?system:node:i-0123456789abcdef0/);

    // Another instance's name is refused: the certificate names only what EC2 verified.
    const other = await awsJoin(
      environment,
      '--node-name',
      'i-0fffffffffffffff0',
      '--dir',
      join(dir, 'aws-other'),
    );
    assert.equal(other.code, 77, other.stderr);
    assert.match(other.stderr, /denied/);
  });

  test('without --node-name, as in docs/join.md: the instance id and credentials from IMDS, each retried while IMDS fails', async () => {
    imds.fail('instance-id', 1);
    imds.fail('credentials', 1);
    const outcome = await awsJoin({}, '--dir', join(dir, 'aws-imds'), '-o', 'json');
    assert.equal(outcome.code, 0, outcome.stderr);
    assert.equal(JSON.parse(outcome.stdout).nodeName, instanceId);
    const retries = outcome.stderr.split('\n').filter((l) => l.includes('retrying in'));
    assert.equal(retries.length, 2, outcome.stderr);
    assert.match(
      retries[0] ?? '',
      /^instance id: retrying in \d+s: the metadata service answered 503 for the EC2 instance id/,
    );
    assert.match(
      retries[1] ?? '',
      /^bootstrap request: retrying in \d+s: cannot load the instance profile's AWS credentials: /,
    );
  });

  test('instance-profile credentials that never become available: retried until --timeout, exit 75 with one line', async () => {
    imds.fail('credentials', 1_000_000);
    try {
      const outcome = await awsJoin(
        {},
        '--node-name',
        instanceId,
        '--dir',
        join(dir, 'aws-nocreds'),
        '--timeout',
        '3s',
      );
      assert.equal(outcome.code, 75, outcome.stderr);
      const last = outcome.stderr.trimEnd().split('\n').at(-1) ?? '';
      assert.match(
        last,
        /^kops-controller: bootstrap request: gave up after \d+s: cannot load the instance profile's AWS credentials: /,
      );
      assert.deepEqual(await filesIn(join(dir, 'aws-nocreds')), []);
    } finally {
      imds.fail('credentials', 0);
    }
  });

  test('without a region (no --aws-region, no AWS_REGION): exit 78 at once, before IMDS is asked for the instance id', async () => {
    imds.fail('instance-id', 1_000_000);
    try {
      const started = Date.now();
      const outcome = await awsJoinIn({}, [], '--dir', join(dir, 'aws-noregion'), '--timeout', '20s');
      assert.equal(outcome.code, 78, outcome.stderr);
      assert.equal(
        outcome.stderr,
        'kops-controller: --cloud aws needs the region: pass --aws-region or set AWS_REGION\n',
      );
      assert.ok(Date.now() - started < 5_000, `took ${Date.now() - started} ms`);
      assert.deepEqual(await filesIn(join(dir, 'aws-noregion')), []);
    } finally {
      imds.fail('instance-id', 0);
    }
  });

  test('an instance id IMDS never gives: retried until --timeout, exit 75, nothing sent', async () => {
    imds.fail('instance-id', 1_000_000);
    try {
      const outcome = await awsJoin({}, '--dir', join(dir, 'aws-noid'), '--timeout', '3s');
      assert.equal(outcome.code, 75, outcome.stderr);
      const last = outcome.stderr.trimEnd().split('\n').at(-1) ?? '';
      assert.match(
        last,
        /^kops-controller: instance id: gave up after \d+s: the metadata service answered 503/,
      );
      assert.deepEqual(await filesIn(join(dir, 'aws-noid')), []);
    } finally {
      imds.fail('instance-id', 0);
    }
  });
});
