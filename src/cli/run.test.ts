import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { describe, test } from 'node:test';
import type { V1Lease } from '@kubernetes/client-node';
import { eventually, holdPort, idleCrowd } from '../net/testing.ts';
import { createCa } from '../pki/ca.ts';
import { saveCa } from '../pki/folder.ts';
import { type SimApiServer, startApiServer } from '../sim/apiserver/index.ts';
import { type AwsSimulator, startAwsSimulator } from '../sim/aws/server.ts';
import { openVfs } from '../statestore/open.ts';
import { capturedLogger } from '../testing/log-capture.ts';
import { silentServer } from '../testing/silent-server.ts';
import { defaultBootstrapWorkers, runUntilStopped, SignalRelay } from './run.ts';

const projectRoot = new URL('../..', import.meta.url);

/** Starts `kops-controller run` and resolves with the URL it logs once its endpoint listens. */
function startController(
  args: string[],
  env: NodeJS.ProcessEnv = process.env,
): {
  child: ChildProcess;
  url: Promise<string>;
  exit: Promise<number | null>;
  stderr: string[];
} {
  const child = spawn(process.execPath, ['src/cli/main.ts', 'run', ...args], {
    cwd: projectRoot,
    env,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const stderr: string[] = [];
  const exit = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const url = new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stderr! }).on('line', (line) => {
      stderr.push(line);
      try {
        const record = JSON.parse(line) as { url?: string };
        if (record.url) resolve(record.url);
      } catch {
        // not a log record
      }
    });
    exit.then((code) => reject(new Error(`controller exited with ${code}: ${stderr.join('\n')}`)));
  });
  return { child, url, exit, stderr };
}

/** The exit code, or 'hung' when the process has not exited within `ms`. */
function exitWithin(exit: Promise<number | null>, ms: number): Promise<number | null | 'hung'> {
  return Promise.race([
    exit,
    new Promise<'hung'>((resolve) => setTimeout(() => resolve('hung'), ms).unref()),
  ]);
}

/** The handles each backstop line of the log names (one line when the backstop ended the process). */
function heldOpen(stderr: readonly string[]): string[][] {
  return stderr
    .filter((line) => line.includes('open handles kept the process alive'))
    .map((line) => (JSON.parse(line) as { handles: string[] }).handles);
}

async function poll<T>(read: () => Promise<T>, done: (value: T) => boolean, what: string): Promise<T> {
  for (let i = 0; i < 500; i++) {
    const value = await read();
    if (done(value)) return value;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  assert.fail(`timed out waiting for ${what}`);
}

/**
 * SIGTERM ends the controller with 0 well within the DaemonSet's 30 s grace, and nothing outlived the
 * shutdown: the exit-grace backstop did not have to end the process.
 */
async function stopsCleanly(controller: ReturnType<typeof startController>): Promise<void> {
  controller.child.kill('SIGTERM');
  assert.equal(await exitWithin(controller.exit, 10_000), 0, controller.stderr.join('\n'));
  assert.deepEqual(heldOpen(controller.stderr), [], controller.stderr.join('\n'));
}

/** A fresh folder with `sim`'s kubeconfig and a cluster CA a bootstrap server can load; its paths. */
async function serverFolder(sim: SimApiServer): Promise<{ dir: string; kubeconfig: string; conf: string }> {
  const dir = await mkdtemp(join(tmpdir(), 'run-'));
  const kubeconfig = join(dir, 'kubeconfig');
  await writeFile(kubeconfig, sim.kubeconfig());
  await saveCa(openVfs(dir), createCa(), 'pem');
  return { dir, kubeconfig, conf: join(dir, 'config.yaml') };
}

/** The child's environment with every AWS call to `endpoint`: no shared config, profile or IMDS in the way. */
function awsEnvOf(
  dir: string,
  endpoint: string,
  credentials = { accessKeyId: 'AKIDTEST', secretAccessKey: 'secret' },
  region = 'us-test-1',
): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    AWS_ENDPOINT_URL: endpoint,
    AWS_REGION: region,
    AWS_ACCESS_KEY_ID: credentials.accessKeyId,
    AWS_SECRET_ACCESS_KEY: credentials.secretAccessKey,
    AWS_EC2_METADATA_DISABLED: 'true',
    AWS_CONFIG_FILE: join(dir, 'none'),
    AWS_SHARED_CREDENTIALS_FILE: join(dir, 'none'),
  };
  delete env['AWS_PROFILE'];
  delete env['AWS_SESSION_TOKEN'];
  return env;
}

/** A config on `cloud` with an empty state store in `dir` and a lease that fails over in seconds. */
function writeFastLeaderConfig(path: string, cloud: string, dir: string): Promise<void> {
  return writeFile(
    path,
    [
      'clusterName: run.example.com',
      `cloud: ${cloud}`,
      `configBase: file://${dir}/state`,
      'metrics:',
      '  listen: 127.0.0.1:0',
      'leaderElection:',
      '  leaseDuration: 2s',
      '  renewDeadline: 1s',
      '  retryPeriod: 200ms',
      '',
    ].join('\n'),
  );
}

describe('kops-controller run', () => {
  test('serves its endpoints, leads, and on SIGTERM releases the lease and exits 0', async () => {
    const sim = await startApiServer();
    const dir = await mkdtemp(join(tmpdir(), 'run-'));
    const kubeconfig = join(dir, 'kubeconfig');
    const conf = join(dir, 'config.yaml');
    await writeFile(kubeconfig, sim.kubeconfig());
    await writeFile(
      conf,
      [
        'clusterName: run.example.com',
        'cloud: metal',
        'metrics:',
        '  listen: 127.0.0.1:0',
        'leaderElection:',
        '  leaseDuration: 2s',
        '  renewDeadline: 1s',
        '  retryPeriod: 200ms',
        '',
      ].join('\n'),
    );
    const controller = startController(['--conf', conf, '--kubeconfig', kubeconfig]);
    try {
      const url = await controller.url;
      const health = await fetch(`${url}/healthz`);
      assert.equal(health.status, 200);
      const ready = await poll(
        () => fetch(`${url}/readyz`),
        (res) => res.status === 200,
        'readiness',
      );
      assert.match(await ready.text(), /^\[\+\]leader-election ok$/m);
      const metrics = await poll(
        () => fetch(`${url}/metrics`).then((res) => res.text()),
        (text) => /^leader_election_master_status\{name="kops-controller-leader"\} 1$/m.test(text),
        'leadership in /metrics',
      );
      assert.match(metrics, /^process_cpu_user_seconds_total /m, 'process metrics are included');
      const lease = () =>
        sim.store.get('leases', 'kube-system', 'kops-controller-leader') as V1Lease | undefined;
      assert.match(lease()?.spec?.holderIdentity ?? '', /_[0-9a-f]{8}$/, 'hostname_random identity');

      controller.child.kill('SIGTERM');
      assert.equal(await controller.exit, 0, controller.stderr.join('\n'));
      assert.equal(lease()?.spec?.holderIdentity, '', 'the lease is released');
      assert.ok(controller.stderr.some((line) => line.includes('shutting down')));
      await assert.rejects(fetch(`${url}/healthz`), 'the endpoint is closed');
    } finally {
      controller.child.kill('SIGKILL');
      await sim.close();
    }
  });

  test('on SIGTERM exits 0 within seconds while the API server accepts connections and never answers', async () => {
    const silent = await silentServer();
    const dir = await mkdtemp(join(tmpdir(), 'run-'));
    const kubeconfig = join(dir, 'kubeconfig');
    const conf = join(dir, 'config.yaml');
    await writeFile(
      kubeconfig,
      [
        'apiVersion: v1',
        'kind: Config',
        `clusters: [{name: silent, cluster: {server: '${silent.endpoint}', insecure-skip-tls-verify: true}}]`,
        'users: [{name: u, user: {token: t}}]',
        'contexts: [{name: silent, context: {cluster: silent, user: u}}]',
        'current-context: silent',
        '',
      ].join('\n'),
    );
    // With a state store the leader's components are built, and their Node and CSR watches list.
    await writeFastLeaderConfig(conf, 'metal', dir);
    const controller = startController(['--conf', conf, '--kubeconfig', kubeconfig]);
    try {
      await controller.url;
      // The Node and CSR list pages and the lease read are waiting for answers.
      assert.equal(await eventually(() => silent.accepted() >= 3, true), true, controller.stderr.join('\n'));
      // Not the list pages' 60 s deadline, nor the lease read's renewDeadline: the watches gave up
      // their pages and the elector its lease read.
      await stopsCleanly(controller);
    } finally {
      controller.child.kill('SIGKILL');
      silent.close();
    }
  });

  test('on SIGTERM exits 0 within seconds while a cloud call waits on an endpoint that never answers', async () => {
    const [sim, silent] = await Promise.all([startApiServer(), silentServer()]);
    const dir = await mkdtemp(join(tmpdir(), 'run-'));
    const kubeconfig = join(dir, 'kubeconfig');
    const conf = join(dir, 'config.yaml');
    await writeFile(kubeconfig, sim.kubeconfig());
    // The leader's components need a state store; an empty one serves, the cloud is what hangs.
    await writeFastLeaderConfig(conf, 'aws', dir);
    // Every AWS call of the child goes to the silent endpoint, with credentials that sign nothing real.
    const controller = startController(
      ['--conf', conf, '--kubeconfig', kubeconfig],
      awsEnvOf(dir, silent.endpoint),
    );
    try {
      await controller.url;
      // The leader's validation gauges list the Auto Scaling groups at once: that call now waits.
      assert.equal(await eventually(() => silent.accepted() >= 1, true), true, controller.stderr.join('\n'));
      // Destroying the AWS clients gave their calls up.
      await stopsCleanly(controller);
    } finally {
      controller.child.kill('SIGKILL');
      silent.close();
      await sim.close();
    }
  });

  describe('STS failing as the replica starts (the aws policy learns its account first)', () => {
    /** A config with the aws policy and a bootstrap server, the child's AWS calls to `aws`. */
    async function awsReplica(aws: AwsSimulator, sim: SimApiServer) {
      const { dir, kubeconfig, conf } = await serverFolder(sim);
      await writeFile(
        conf,
        [
          'clusterName: run.example.com',
          'cloud: aws',
          'metrics:',
          '  listen: 127.0.0.1:0',
          'server:',
          '  Listen: 127.0.0.1:0',
          `  caBasePath: ${dir}`,
          '  provider:',
          `    aws: {nodesRoles: [nodes.run.example.com], Region: ${aws.region}}`,
          '',
        ].join('\n'),
      );
      return startController(
        ['--conf', conf, '--kubeconfig', kubeconfig, '--bootstrap-workers', '1'],
        awsEnvOf(dir, aws.endpoint, aws.credentials, aws.region),
      );
    }

    const waiting = (controller: ReturnType<typeof startController>) =>
      controller.stderr.some((line) => line.includes('retrying before giving up the start-up'));

    test('it waits, even with the API server failing too (no exit 13 with nothing else holding the process), and starts once STS answers', async () => {
      const [aws, sim] = await Promise.all([startAwsSimulator({ throttling: false }), startApiServer()]);
      aws.faults.add({ service: 'sts', error: { code: 'ServiceUnavailable', status: 503 } });
      sim.faults.errors({ rate: 1, status: 503 });
      const controller = await awsReplica(aws, sim);
      controller.url.catch(() => undefined);
      try {
        assert.equal(await eventually(() => waiting(controller), true), true, controller.stderr.join('\n'));
        // Longer than it took to crash before: the first retry waits 1 s, the next 2 s.
        assert.equal(await exitWithin(controller.exit, 4_000), 'hung', controller.stderr.join('\n'));
        aws.faults.reset();
        sim.faults.reset();
        await controller.url;
        assert.ok(
          controller.stderr.some((line) => line.includes("learnt this controller's AWS account from STS")),
        );
        await stopsCleanly(controller);
      } finally {
        controller.child.kill('SIGKILL');
        await Promise.all([aws.close(), sim.close()]);
      }
    });

    test('SIGTERM while it waits ends it at once with 0', async () => {
      const [aws, sim] = await Promise.all([startAwsSimulator({ throttling: false }), startApiServer()]);
      aws.faults.add({ service: 'sts', error: { code: 'ServiceUnavailable', status: 503 } });
      const controller = await awsReplica(aws, sim);
      controller.url.catch(() => undefined);
      try {
        assert.equal(await eventually(() => waiting(controller), true), true, controller.stderr.join('\n'));
        controller.child.kill('SIGTERM');
        assert.equal(await exitWithin(controller.exit, 5_000), 0, controller.stderr.join('\n'));
        assert.ok(controller.stderr.some((line) => line.includes('shutting down before start-up ended')));
      } finally {
        controller.child.kill('SIGKILL');
        await Promise.all([aws.close(), sim.close()]);
      }
    });
  });

  test('a taken port, metrics or bootstrap, exits 78 with one line naming it', async () => {
    const sim = await startApiServer();
    const { dir, kubeconfig } = await serverFolder(sim);
    const taken = await holdPort();
    const cases = [
      { metrics: taken.port, bootstrap: 0, setting: 'metrics.listen' },
      { metrics: 0, bootstrap: taken.port, setting: 'server.Listen' },
    ];
    try {
      for (const { metrics, bootstrap, setting } of cases) {
        const conf = join(dir, `config-${setting}.yaml`);
        await writeFile(
          conf,
          [
            'clusterName: run.example.com',
            'cloud: metal',
            'metrics:',
            `  listen: 127.0.0.1:${metrics}`,
            'server:',
            `  Listen: 127.0.0.1:${bootstrap}`,
            `  caBasePath: ${dir}`,
            // A server must say how nodes are approved; this one denies them all.
            'bootstrap:',
            '  policies: [{name: always-reject}]',
            '',
          ].join('\n'),
        );
        const controller = startController(['--conf', conf, '--kubeconfig', kubeconfig, '-v', '0']);
        controller.url.catch(() => undefined); // it exits before it serves
        // Bounded: the bug was a process that never exits.
        const exited = await Promise.race([
          controller.exit,
          new Promise<'hung'>((resolve) => setTimeout(() => resolve('hung'), 20_000).unref()),
        ]);
        controller.child.kill('SIGKILL');
        assert.equal(exited, 78, `${setting}: ${controller.stderr.join('\n')}`);
        // Besides the JSON log records, one line: the error.
        assert.deepEqual(
          controller.stderr.filter((line) => !line.startsWith('{')),
          [
            `kops-controller: cannot listen on 127.0.0.1:${taken.port}: port ${taken.port} is already in use ` +
              `(EADDRINUSE); choose another address in ${setting}`,
          ],
        );
      }
    } finally {
      await taken.release();
      await sim.close();
    }
  });

  test('the bootstrap server takes its connection caps from the flags; a bad cap exits 65', async () => {
    const sim = await startApiServer();
    const { dir, kubeconfig, conf } = await serverFolder(sim);
    await writeFile(
      conf,
      [
        'clusterName: run.example.com',
        'cloud: metal',
        'metrics:',
        '  listen: 127.0.0.1:0',
        'server:',
        '  Listen: 127.0.0.1:0',
        `  caBasePath: ${dir}`,
        'bootstrap:',
        '  policies: [{name: always-reject}]',
        '',
      ].join('\n'),
    );
    const args = ['--conf', conf, '--kubeconfig', kubeconfig];
    const controller = startController([...args, '--bootstrap-max-connections-per-source', '2']);
    try {
      await controller.url;
      const listening = controller.stderr
        .map((line) => JSON.parse(line) as { msg?: string; url?: string })
        .find((record) => record.msg === 'bootstrap server listening');
      const port = Number(new URL(listening?.url ?? '').port);
      const crowd = await idleCrowd(port, 10, ['127.0.0.3']);
      try {
        assert.equal(await eventually(() => crowd.open().length, 2), 2, 'two held, the others reset');
      } finally {
        await crowd.release();
      }
    } finally {
      controller.child.kill('SIGTERM');
      await controller.exit;
      await sim.close();
    }
    const bad = startController([...args, '--bootstrap-max-connections', '0']);
    bad.url.catch(() => undefined);
    assert.equal(await bad.exit, 65);
    assert.deepEqual(bad.stderr, [
      'kops-controller: --bootstrap-max-connections 0: expected a whole number from 1 to 9999999',
    ]);
  });

  test('a server that would deny every node (no provider, server.pki or chain) exits 78 naming the fix', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'run-'));
    const conf = join(dir, 'config.yaml');
    await writeFile(conf, 'clusterName: run.example.com\ncloud: metal\nserver:\n  Listen: 127.0.0.1:0\n');
    const controller = startController(['--conf', conf]);
    await assert.rejects(controller.url);
    assert.equal(await controller.exit, 78);
    assert.equal(controller.stderr.length, 1, controller.stderr.join('\n'));
    assert.match(
      controller.stderr[0] ?? '',
      new RegExp(
        `^kops-controller: ${conf}: server\\.provider: no approval policy is configured, .*bootstrap\\.policies`,
      ),
    );
  });

  test('a config error exits 78 with one readable line', async () => {
    const controller = startController(['--conf', '/nonexistent/config.yaml']);
    await assert.rejects(controller.url);
    assert.equal(await controller.exit, 78);
    assert.deepEqual(controller.stderr, [
      'kops-controller: cannot read config file /nonexistent/config.yaml: no such file; pass --conf FILE',
    ]);
  });
});

test('the bootstrap server serves from one process per core but one, and from this one on two cores or fewer', () => {
  assert.deepEqual([1, 2, 3, 8].map(defaultBootstrapWorkers), [1, 1, 2, 7]);
});

describe('runUntilStopped: SIGTERM and SIGINT through one relay', () => {
  function stubController(stop: () => Promise<void>) {
    let stops = 0;
    let finish!: () => void;
    const done = new Promise<void>((resolve) => {
      finish = resolve;
    });
    const controller = {
      runtime: {
        stop: async () => {
          stops++;
          finish();
        },
        done,
      },
      bootstrap: undefined,
      stop,
    } as unknown as Parameters<typeof runUntilStopped>[0];
    return { controller, stops: () => stops };
  }

  test('the first signal shuts down and stops the listening, so a second acts as a signal does (a hung stop can be ended)', async () => {
    const before = process.listenerCount('SIGTERM');
    const beforeInt = process.listenerCount('SIGINT');
    const { logger, lines } = capturedLogger();
    let release!: () => void;
    const { controller, stops } = stubController(() => new Promise<void>((resolve) => (release = resolve)));
    const relay = new SignalRelay(() => assert.fail('the start-up handler after start-up'));
    assert.equal(process.listenerCount('SIGTERM'), before + 1);
    const running = runUntilStopped(controller, logger, relay);
    process.emit('SIGINT', 'SIGINT');
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(process.listenerCount('SIGTERM'), before, 'no listener left for a second signal');
    assert.equal(process.listenerCount('SIGINT'), beforeInt);
    assert.equal(lines.filter((line) => line.includes('"msg":"shutting down"')).length, 1);
    assert.equal(stops(), 1);
    release();
    await running;
  });

  test('a stop that fails still closes the relay', async () => {
    const before = process.listenerCount('SIGTERM');
    const { controller } = stubController(async () => {
      throw new Error('the bootstrap server did not close');
    });
    const relay = new SignalRelay(() => undefined);
    const running = runUntilStopped(controller, capturedLogger().logger, relay);
    // Stopped by something other than a signal (a replaced CA, a component's fatal end): the relay listens until the end.
    assert.equal(process.listenerCount('SIGTERM'), before + 1);
    await controller.runtime.stop();
    await assert.rejects(running, /the bootstrap server did not close/);
    assert.equal(process.listenerCount('SIGTERM'), before);
  });
});
