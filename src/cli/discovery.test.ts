import assert from 'node:assert/strict';
import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { CoreV1Api } from '@kubernetes/client-node';
import { discoverCluster } from '../agent/discovery.ts';
import { newBootstrapToken, tokenSecretOf } from '../bootstrap/tokens.ts';
import { exitCodeOf } from '../errors.ts';
import { makeClients } from '../kube/client.ts';
import { assertTlsPolicy, eventually, holdPort, idleCrowd } from '../net/testing.ts';
import { pinOfCertificatePem } from '../pki/pin.ts';
import {
  detachedJws,
  parseClusterInfoDocument,
  parseClusterInfoKubeconfig,
} from '../protocol/cluster-info.ts';
import { type SimApiServer, startApiServer } from '../sim/apiserver/index.ts';
import { type S3Sim, startS3Sim } from '../sim/s3/server.ts';
import {
  createCertificateAuthority,
  issueServingCertificate,
  type SimCertificateAuthority,
} from '../sim/tls.ts';
import { runCli } from '../testing/cli.ts';

const root = mkdtempSync(join(tmpdir(), 'kops-discovery-cli-'));
after(() => rmSync(root, { recursive: true, force: true }));
const mainScript = join(import.meta.dirname, 'main.ts');

/** Runs `kops-controller discovery ...` in process and returns what it printed. */
function discovery(...args: string[]): Promise<string> {
  return runCli('discovery', ...args);
}

/**
 * Starts `kops-controller discovery serve` as its own process, with `nodeArgs` for Node; resolves with
 * its URL once it listens.
 */
function serve(
  args: string[],
  env: NodeJS.ProcessEnv = {},
  nodeArgs: string[] = [],
): Promise<{ url: string; child: ChildProcess; output: () => string }> {
  const child = spawn(process.execPath, [...nodeArgs, mainScript, '-v', '0', 'discovery', 'serve', ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return new Promise((resolve, reject) => {
    let out = '';
    let err = '';
    child.stderr?.on('data', (chunk: Buffer) => (err += chunk));
    child.stdout?.on('data', (chunk: Buffer) => {
      out += chunk;
      const match = /serving cluster-info on (\S+)/.exec(out);
      if (match) resolve({ url: match[1] as string, child, output: () => out + err });
    });
    child.once('exit', (code) => reject(new Error(`discovery serve exited ${code}: ${err}`)));
  });
}

/** Stops a served process with SIGTERM and returns its exit code. */
function stop(child: ChildProcess): Promise<number | null> {
  return new Promise((resolve) => {
    child.removeAllListeners('exit');
    child.once('exit', (code) => resolve(code));
    child.kill('SIGTERM');
  });
}

describe('kops-controller discovery', () => {
  let sim: SimApiServer;
  let core: CoreV1Api;
  let s3: S3Sim;
  let ca: SimCertificateAuthority;
  let caFile = '';
  let certFile = '';
  let keyFile = '';
  let kubeconfigFile = '';
  const signer = newBootstrapToken({ usages: ['signing'] });
  const authOnly = newBootstrapToken({ usages: ['authentication'] });
  let s3Env: NodeJS.ProcessEnv = {};

  /** Publishes https://api.example.com (and `more` options) with the test CA to `to`. */
  const publishTo = (to: string, ...more: string[]) =>
    discovery(
      'publish',
      '--server',
      'https://api.example.com',
      ...more,
      '--ca-file',
      caFile,
      '--to',
      to,
      '--kubeconfig',
      kubeconfigFile,
    );

  before(async () => {
    sim = await startApiServer();
    core = makeClients(sim.kubeConfig()).core;
    for (const token of [signer, authOnly]) {
      await core.createNamespacedSecret({ namespace: 'kube-system', body: tokenSecretOf(token) });
    }
    kubeconfigFile = join(root, 'kubeconfig');
    writeFileSync(kubeconfigFile, sim.kubeconfig());
    ca = await createCertificateAuthority('cluster-ca');
    const serving = await issueServingCertificate(ca);
    caFile = join(root, 'ca.crt');
    certFile = join(root, 'serving.crt');
    keyFile = join(root, 'serving.key');
    writeFileSync(caFile, ca.certificate);
    writeFileSync(certFile, serving.certificate);
    writeFileSync(keyFile, serving.privateKey, { mode: 0o600 });
    s3 = await startS3Sim({ buckets: ['state'] });
    s3Env = {
      S3_ENDPOINT: s3.endpoint,
      S3_REGION: 'us-test-1',
      S3_ACCESS_KEY_ID: s3.credentials.accessKeyId,
      S3_SECRET_ACCESS_KEY: s3.credentials.secretAccessKey,
    };
  });
  after(async () => {
    await sim.close();
    await s3.close();
  });

  test('publish to a file: the kubeconfig names the servers and CA, signed by signing tokens only', async () => {
    const to = join(root, 'cluster-info.json');
    const summary = JSON.parse(await publishTo(to, '--server', 'https://10.0.0.1:6443', '-o', 'json')) as {
      signedBy: string[];
    };
    assert.deepEqual(summary.signedBy, [signer.id]);
    const document = parseClusterInfoDocument(readFileSync(to, 'utf8'));
    const kubeconfig = document.data['kubeconfig'] as string;
    assert.deepEqual(parseClusterInfoKubeconfig(kubeconfig), {
      servers: ['https://api.example.com', 'https://10.0.0.1:6443'],
      caBundlePem: ca.certificate,
    });
    assert.equal(
      document.data[`jws-kubeconfig-${signer.id}`],
      detachedJws(kubeconfig, signer.id, signer.secret),
    );
    assert.equal(document.data[`jws-kubeconfig-${authOnly.id}`], undefined);
  });

  test('publish to s3://, then serve it: curl verifies TLS with --cacert, a node discovers with pin and token', async () => {
    const saved = Object.fromEntries(Object.keys(s3Env).map((k) => [k, process.env[k]]));
    Object.assign(process.env, s3Env);
    try {
      const printed = await publishTo('s3://state/cluster.example.com/cluster-info.json');
      assert.match(printed, new RegExp(`signed by 1 token\\(s\\): ${signer.id}`));
    } finally {
      for (const [k, v] of Object.entries(saved)) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
    const stored = s3.getObject('state', 'cluster.example.com/cluster-info.json')?.toString() ?? '';
    const { url, child } = await serve(
      [
        '--from',
        's3://state/cluster.example.com/cluster-info.json',
        '--listen',
        '127.0.0.1:0',
        '--tls-cert',
        certFile,
        '--tls-key',
        keyFile,
        '--refresh',
        '1s',
      ],
      s3Env,
    );
    try {
      assert.match(url, /^https:\/\/127\.0\.0\.1:\d+\/cluster-info$/);
      const body = execFileSync('curl', ['-sS', '--fail', '--cacert', caFile, url], { encoding: 'utf8' });
      assert.deepEqual(JSON.parse(body), JSON.parse(stored));
      const found = await discoverCluster({
        url: url.replace('/cluster-info', ''),
        caPins: [pinOfCertificatePem(ca.certificate)],
        token: `${signer.id}.${signer.secret}`,
      });
      assert.equal(found.server, 'https://api.example.com');
      assert.equal(found.verifiedTokenId, signer.id);
      // Without the CA, curl refuses the server: the endpoint is not trusted by the system roots.
      assert.throws(() => execFileSync('curl', ['-sS', '--fail', url], { stdio: 'pipe' }));
      // A new publication reaches the running server at its next refresh; a broken one is not served.
      const republished = { ...JSON.parse(stored), data: { kubeconfig: 'republished' } };
      s3.putObject('state', 'cluster.example.com/cluster-info.json', JSON.stringify(republished));
      const served = () =>
        JSON.parse(execFileSync('curl', ['-sS', '--fail', '--cacert', caFile, url], { encoding: 'utf8' }));
      for (let tries = 0; served().data.kubeconfig !== 'republished'; tries++) {
        assert.ok(tries < 100, 'the server never picked up the new publication');
        await new Promise((r) => setTimeout(r, 200));
      }
      s3.putObject('state', 'cluster.example.com/cluster-info.json', 'not json');
      await new Promise((r) => setTimeout(r, 1500));
      assert.equal(served().data.kubeconfig, 'republished', 'the last good document stays');
    } finally {
      assert.equal(await stop(child), 0, 'SIGTERM stops it cleanly');
    }
  });

  test('with deploy/openssl.cnf, as the image and npm scripts start it, the server sends no session tickets', async () => {
    const shippedConfig = join(import.meta.dirname, '..', '..', 'deploy', 'openssl.cnf');
    const from = join(root, 'cluster-info.json');
    await publishTo(from);
    // openssl s_client prints every handshake message it gets with -msg; tickets follow the handshake.
    const ticketsFrom = (url: string, version: string) => {
      const { port } = new URL(url);
      const out = spawnSync(
        'openssl',
        ['s_client', version, '-connect', `127.0.0.1:${port}`, '-CAfile', caFile, '-msg', '-ign_eof'],
        {
          input: 'GET /cluster-info HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n',
          encoding: 'utf8',
          timeout: 10_000,
        },
      );
      assert.match(out.stdout, /Verify return code: 0 \(ok\)/, out.stderr);
      return out.stdout.match(/NewSessionTicket/g)?.length ?? 0;
    };
    const counts = async (nodeArgs: string[]) => {
      const served = await serve(
        ['--from', from, '--listen', '127.0.0.1:0', '--tls-cert', certFile, '--tls-key', keyFile],
        // Neither from the environment: only the flag under test configures OpenSSL.
        { OPENSSL_CONF: undefined, NODE_OPTIONS: undefined },
        nodeArgs,
      );
      try {
        const tickets = [ticketsFrom(served.url, '-tls1_3'), ticketsFrom(served.url, '-tls1_2')];
        return { tickets, warned: /TLS session tickets are on/.test(served.output()) };
      } finally {
        await stop(served.child);
      }
    };
    assert.deepEqual(await counts([`--openssl-config=${shippedConfig}`]), { tickets: [0, 0], warned: false });
    // Node's default, which the check above would miss if it could not see tickets at all; the
    // server says so at start.
    const without = await counts([]);
    assert.ok(
      without.tickets.every((n) => n > 0),
      `tickets without the config: ${without.tickets}`,
    );
    assert.equal(without.warned, true);
  });

  test('serve offers TLS 1.3 first, AEAD suites only on TLS 1.2, and no renegotiation (openssl s_client)', async () => {
    const from = join(root, 'cluster-info.json');
    await publishTo(from);
    const served = await serve([
      '--from',
      from,
      '--listen',
      '127.0.0.1:0',
      '--tls-cert',
      certFile,
      '--tls-key',
      keyFile,
    ]);
    try {
      await assertTlsPolicy(Number(new URL(served.url).port), caFile);
    } finally {
      assert.equal(await stop(served.child), 0);
    }
  });

  test('serve refuses a source over its cap as it connects, serves the others, and closes idle connections after the default 5 s', async () => {
    const from = join(root, 'cluster-info.json');
    await publishTo(from);
    const served = await serve([
      '--from',
      from,
      '--listen',
      '127.0.0.1:0',
      '--tls-cert',
      certFile,
      '--tls-key',
      keyFile,
      '--max-connections-per-source',
      '20',
    ]);
    const crowd = await idleCrowd(Number(new URL(served.url).port), 500, ['127.0.0.3']);
    try {
      assert.equal(await eventually(() => crowd.open().length, 20), 20, 'held up to the cap');
      assert.ok(crowd.sockets.every((s) => !s.closedByUs));
      const body = execFileSync(
        'curl',
        ['-sS', '--fail', '--interface', '127.0.0.2', '--cacert', caFile, served.url],
        { encoding: 'utf8' },
      );
      assert.equal(parseClusterInfoDocument(body, 'served').kind, 'ConfigMap');
      // The held connections never sent a byte: they are idle, and the default idle timeout (5 s) closes them.
      await crowd.settled(15_000);
      assert.equal(crowd.open().length, 0);
      assert.ok(crowd.sockets.every((s) => !s.closedByUs));
    } finally {
      await crowd.release();
      assert.equal(await stop(served.child), 0);
    }
  });

  test('serve on a taken port exits 78 with one line naming the port', async () => {
    const from = join(root, 'cluster-info.json');
    await publishTo(from);
    const taken = await holdPort();
    try {
      const run = spawnSync(
        process.execPath,
        [
          mainScript,
          '-v',
          '0',
          'discovery',
          'serve',
          '--from',
          from,
          '--plain-http',
          '--listen',
          `127.0.0.1:${taken.port}`,
        ],
        { encoding: 'utf8', timeout: 20_000 },
      );
      assert.equal(run.status, 78, run.stderr);
      assert.equal(
        run.stderr,
        `kops-controller: cannot listen on 127.0.0.1:${taken.port}: port ${taken.port} is already in use ` +
          '(EADDRINUSE); choose another address in --listen\n',
      );
    } finally {
      await taken.release();
    }
  });

  test('bad input is refused before anything is written or served', async () => {
    const fails = async (args: string[], message: RegExp) =>
      assert.rejects(discovery(...args), (err: Error) => {
        assert.ok([65, 66].includes(exitCodeOf(err)), `${exitCodeOf(err)}: ${err.message}`);
        assert.match(err.message, message);
        return true;
      });
    const publish = [
      'publish',
      '--ca-file',
      caFile,
      '--to',
      join(root, 'x.json'),
      '--kubeconfig',
      kubeconfigFile,
    ];
    await fails([...publish, '--server', 'http://api.example.com'], /https/);
    await fails(
      ['publish', '--server', 'https://a', '--ca-file', join(root, 'nope'), '--to', 'x.json'],
      /--ca-file/,
    );
    await fails(
      ['publish', '--server', 'https://a', '--ca-file', caFile, '--to', 's3://state'],
      /does not name a file/,
    );
    await fails(['serve', '--from', join(root, 'cluster-info.json')], /--tls-cert and --tls-key/);
    await fails(['serve', '--from', join(root, 'cluster-info.json'), '--tls-cert', certFile], /both/);
    await fails(
      ['serve', '--from', join(root, 'missing.json'), '--plain-http', '--listen', '127.0.0.1:0'],
      /missing/,
    );
    await fails(
      ['serve', '--from', join(root, 'cluster-info.json'), '--plain-http', '--listen', 'foo'],
      /^--listen foo: invalid listen address "foo"/,
    );
  });
});
