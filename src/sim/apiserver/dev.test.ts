import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { ConfigError } from '../../errors.ts';
import { startDevApiServer } from './dev.ts';
import { parseMainArgs } from './main.ts';

test('startDevApiServer writes an owner-only admin kubeconfig that works', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'sim-dev-'));
  const dev = await startDevApiServer({ stateDir: join(dir, 'state') });
  try {
    assert.equal(dev.kubeconfigPath, join(dir, 'state', 'kubeconfig'));
    assert.equal(dev.exportLine, `export KUBECONFIG=${dev.kubeconfigPath}`);
    assert.equal((await stat(dev.kubeconfigPath)).mode & 0o777, 0o600);
    assert.equal(await readFile(join(dir, 'state', 'ca.crt'), 'utf8'), dev.server.caCertificate);
    const kc = new KubeConfig();
    kc.loadFromFile(dev.kubeconfigPath);
    const namespaces = await kc.makeApiClient(CoreV1Api).listNamespace();
    assert.ok(namespaces.items.some((n) => n.metadata?.name === 'kube-system'));
  } finally {
    await dev.close();
    await rm(dir, { recursive: true, force: true });
  }
});

test('startDevApiServer says which directory it cannot use', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'sim-dev-'));
  try {
    // A state directory under a regular file cannot be created.
    await writeFile(join(dir, 'file'), '');
    await assert.rejects(
      startDevApiServer({ stateDir: join(dir, 'file', 'state') }),
      /cannot create state directory/,
    );
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('the standalone process parses its flags and rejects bad ones', () => {
  assert.deepEqual(parseMainArgs(['--state-dir', '/tmp/x', '--port', '6443']), {
    stateDir: '/tmp/x',
    port: 6443,
    host: '127.0.0.1',
  });
  assert.throws(() => parseMainArgs([]), /--state-dir is required/);
  assert.throws(() => parseMainArgs(['--state-dir', 'd', '--port', 'http']), /--port http/);
  assert.throws(() => parseMainArgs(['--state-dir', 'd', '--bogus']), ConfigError);
});
