import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { CoreV1Api } from '@kubernetes/client-node';
import { discoverCluster } from '../agent/discovery.ts';
import {
  ClusterInfoPublisher,
  clusterInfoHandler,
  configMapClusterInfoSource,
} from '../bootstrap/discovery.ts';
import { apiTokenSource, TokenValidator, WatchedTokenSecrets } from '../bootstrap/tokens.ts';
import { exitCodeOf } from '../errors.ts';
import { makeClients } from '../kube/client.ts';
import { pinOfCertificatePem } from '../pki/pin.ts';
import { renderClusterInfoKubeconfig } from '../protocol/cluster-info.ts';
import { type SimApiServer, startApiServer } from '../sim/apiserver/index.ts';
import { createCertificateAuthority, issueServingCertificate } from '../sim/tls.ts';
import { runCli } from '../testing/cli.ts';

const root = mkdtempSync(join(tmpdir(), 'kops-token-cli-'));
after(() => rmSync(root, { recursive: true, force: true }));

describe('kops-controller token', () => {
  let sim: SimApiServer;
  let core: CoreV1Api;
  let kubeconfig = '';
  before(async () => {
    sim = await startApiServer();
    core = makeClients(sim.kubeConfig()).core;
    kubeconfig = join(root, 'kubeconfig');
    writeFileSync(kubeconfig, sim.kubeconfig());
  });
  after(() => sim.close());

  /** Runs `kops-controller token ...` in process and returns what it printed. */
  function token(...args: string[]): Promise<string> {
    return runCli('token', ...args, '--kubeconfig', kubeconfig);
  }

  test('create prints the token once; it validates and carries the asked usages and groups', async () => {
    const printed = (await token('create', '--description', 'workers')).trim();
    assert.match(printed, /^[a-z0-9]{6}\.[a-z0-9]{16}$/);
    const info = await new TokenValidator(apiTokenSource(core)).validate(printed, new Date());
    assert.ok(!('rejected' in info), JSON.stringify(info));
    assert.equal(info?.description, 'workers');
    assert.deepEqual(info?.usages, { authentication: true, signing: true });
    const ttlMs = (info?.expires?.getTime() ?? 0) - Date.now();
    assert.ok(ttlMs > 23 * 3_600_000 && ttlMs <= 24 * 3_600_000, 'default TTL 24h');

    const json = JSON.parse(
      await token(
        'create',
        '--ttl',
        '30m',
        '--usages',
        'signing',
        '--groups',
        'system:bootstrappers:kops:nodes',
        '-o',
        'json',
      ),
    ) as { token: string; id: string; expires: string; usages: string[]; groups: string[] };
    assert.equal(json.token.split('.')[0], json.id);
    assert.deepEqual(json.usages, ['signing']);
    assert.deepEqual(json.groups, ['system:bootstrappers:kops:nodes']);
    assert.match(json.expires, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    assert.deepEqual(await new TokenValidator(apiTokenSource(core)).validate(json.token, new Date()), {
      rejected: `bootstrap token ${json.id}: not usable for authentication`,
    });
  });

  test('list shows id, expiry, usages and description, never the secret', async () => {
    const created = (await token('create', '--ttl', '0', '--description', 'forever')).trim();
    const [id, secret] = created.split('.') as [string, string];
    const table = await token('list');
    assert.match(
      table.split('\n')[0] as string,
      /^ID\s+TTL\s+EXPIRES\s+USAGES\s+DESCRIPTION\s+EXTRA GROUPS$/,
    );
    assert.match(
      table,
      new RegExp(`^${id}\\s+<forever>\\s+never\\s+signing,authentication\\s+forever$`, 'm'),
    );
    assert.doesNotMatch(table, new RegExp(secret));
    const json = await token('list', '-o', 'json');
    assert.doesNotMatch(json, new RegExp(secret));
    const rows = JSON.parse(json) as { id: string; expires: string; description: string }[];
    assert.deepEqual(
      rows.find((r) => r.id === id),
      {
        id,
        expires: 'never',
        ttl: null,
        expired: false,
        usages: ['signing', 'authentication'],
        groups: [],
        description: 'forever',
      },
    );
    assert.doesNotMatch(await token('list', '-o', 'yaml'), new RegExp(secret));
  });

  test('delete by id or by whole token; a second delete is not found', async () => {
    const first = (await token('create')).trim();
    const second = (await token('create')).trim();
    const firstId = first.split('.')[0] as string;
    assert.equal(await token('delete', firstId), `bootstrap token ${firstId} deleted\n`);
    await token('delete', second);
    const ids = (JSON.parse(await token('list', '-o', 'json')) as { id: string }[]).map((r) => r.id);
    assert.ok(!ids.includes(firstId) && !ids.includes(second.split('.')[0] as string));
    await assert.rejects(token('delete', firstId), (err: Error) => {
      assert.equal(exitCodeOf(err), 66);
      assert.match(err.message, /no bootstrap token with id/);
      return true;
    });
  });

  test('bad input fails with a clear message and the input exit code', async () => {
    for (const [args, message] of [
      [['create', '--usages', 'signing,root'], /unknown token usage "root"/],
      [['create', '--groups', 'system:masters'], /system:bootstrappers/],
      [['create', '--ttl', 'soon'], /invalid duration/],
      [['create', '--usages', ''], /at least one usage/],
      [['delete', 'NOT-AN-ID'], /not a token id/],
    ] as const) {
      await assert.rejects(token(...args), (err: Error) => {
        assert.equal(exitCodeOf(err), 65, err.message);
        assert.match(err.message, message);
        return true;
      });
    }
  });

  test('token create, then at once discovery with that token: signed within seconds, no minute-long poll', async (t) => {
    // The controller's side as `run` wires it: the signer follows the token watch, and the bootstrap
    // server answers GET /cluster-info from the ConfigMap, read at most every 2 s.
    const clusterCa = await createCertificateAuthority('token-cli-cluster-ca');
    const serving = await issueServingCertificate(clusterCa);
    const tokens = new WatchedTokenSecrets({ kubeConfig: sim.kubeConfig(), api: apiTokenSource(core) });
    tokens.start();
    const kubeconfig = renderClusterInfoKubeconfig({
      servers: ['https://api.token-cli.example.com'],
      caBundlePem: clusterCa.certificate,
    });
    const stop = new AbortController();
    const signer = new ClusterInfoPublisher({ core, source: tokens, kubeconfig: () => kubeconfig });
    const running = signer.start(stop.signal);
    const server = createServer(
      { key: serving.privateKey, cert: serving.certificate },
      clusterInfoHandler(configMapClusterInfoSource(core, { maxAgeMs: 2_000 })),
    );
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const created = (await token('create')).trim();
      const started = Date.now();
      const discover = () =>
        discoverCluster({
          url: `https://127.0.0.1:${(server.address() as AddressInfo).port}`,
          caPins: [pinOfCertificatePem(clusterCa.certificate)],
          token: created,
        });
      // `join` retries a missing signature; poll as it does, with a bound far above what it takes.
      let found: Awaited<ReturnType<typeof discover>> | undefined;
      while (!found) {
        found = await discover().catch((err: Error & { details?: { reason?: string } }) => {
          if (err.details?.reason !== 'jws-missing' || Date.now() - started > 15_000) throw err;
          return new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 100));
        });
      }
      t.diagnostic(`discovery succeeded ${Date.now() - started} ms after token create`);
      assert.equal(found.verifiedTokenId, created.split('.')[0]);
    } finally {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      stop.abort();
      await running;
      await tokens.stop();
    }
  });
});
