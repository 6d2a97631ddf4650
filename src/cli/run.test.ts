import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { describe, test } from 'node:test';
import type { V1Lease } from '@kubernetes/client-node';
import { startApiServer } from '../sim/apiserver/index.ts';

const projectRoot = new URL('../..', import.meta.url);

/** Starts `kops-controller run` and resolves with the URL it logs once its endpoint listens. */
function startController(args: string[]): {
  child: ChildProcess;
  url: Promise<string>;
  exit: Promise<number | null>;
  stderr: string[];
} {
  const child = spawn(process.execPath, ['src/cli/main.ts', 'run', ...args], {
    cwd: projectRoot,
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

async function poll<T>(read: () => Promise<T>, done: (value: T) => boolean, what: string): Promise<T> {
  for (let i = 0; i < 500; i++) {
    const value = await read();
    if (done(value)) return value;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  assert.fail(`timed out waiting for ${what}`);
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
        // kops' gossip block: accepted, with a warning that this controller does not implement it.
        'discovery:',
        '  enabled: true',
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
      assert.ok(
        controller.stderr.some((line) => /"level":"warn".*discovery\.enabled .* not implemented/.test(line)),
        'the gossip warning is logged at warn level',
      );
      await assert.rejects(fetch(`${url}/healthz`), 'the endpoint is closed');
    } finally {
      controller.child.kill('SIGKILL');
      await sim.close();
    }
  });

  test('a config error exits 78 with one readable line', async () => {
    const controller = startController(['--conf', '/nonexistent/config.yaml']);
    await assert.rejects(controller.url);
    assert.equal(await controller.exit, 78);
    assert.deepEqual(controller.stderr, [
      'kops-controller: cannot read config file /nonexistent/config.yaml: no such file; pass --conf FILE: ' +
        "ENOENT: no such file or directory, open '/nonexistent/config.yaml'",
    ]);
  });
});
