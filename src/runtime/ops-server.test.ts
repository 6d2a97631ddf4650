import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Counter, Registry } from 'prom-client';
import { ConfigError } from '../errors.ts';
import { type ReadinessCheck, startOpsServer } from './ops-server.ts';

describe('operations server', () => {
  test('serves /healthz, /readyz with one line per check, and /metrics', async () => {
    const registry = new Registry();
    new Counter({ name: 'test_things_total', help: 'Things.', registers: [registry] }).inc(3);
    let synced = false;
    const checks: ReadinessCheck[] = [
      { name: 'leader-election', check: () => undefined },
      { name: 'informer-nodes', check: () => (synced ? undefined : 'not synced') },
    ];
    const server = await startOpsServer({ listen: '127.0.0.1:0', registry, readinessChecks: () => checks });
    try {
      assert.match(server.url, /^http:\/\/127\.0\.0\.1:\d+$/);
      const health = await fetch(`${server.url}/healthz`);
      assert.equal(health.status, 200);
      assert.equal(await health.text(), 'ok\n');

      const notReady = await fetch(`${server.url}/readyz`);
      assert.equal(notReady.status, 503);
      assert.equal(
        await notReady.text(),
        '[+]leader-election ok\n[-]informer-nodes failed: not synced\nreadyz check failed\n',
      );
      synced = true;
      const ready = await fetch(`${server.url}/readyz`);
      assert.equal(ready.status, 200);
      assert.match(await ready.text(), /readyz check passed\n$/);

      const metrics = await fetch(`${server.url}/metrics`);
      assert.equal(metrics.status, 200);
      assert.match(metrics.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
      assert.match(await metrics.text(), /^test_things_total 3$/m);

      assert.equal((await fetch(`${server.url}/nope`)).status, 404);
      assert.equal((await fetch(`${server.url}/metrics`, { method: 'POST' })).status, 405);
    } finally {
      await server.close();
    }
  });

  test('a failing liveness check and a throwing readiness check are reported, not crashes', async () => {
    const server = await startOpsServer({
      listen: '127.0.0.1:0',
      registry: new Registry(),
      liveness: () => 'component x did not stop',
      readinessChecks: () => [
        {
          name: 'broken',
          check: () => {
            throw new Error('boom');
          },
        },
      ],
    });
    try {
      const health = await fetch(`${server.url}/healthz`);
      assert.equal(health.status, 500);
      assert.equal(await health.text(), 'unhealthy: component x did not stop\n');
      const ready = await fetch(`${server.url}/readyz`);
      assert.equal(ready.status, 503);
      assert.match(await ready.text(), /^\[-\]broken failed: boom$/m);
    } finally {
      await server.close();
    }
  });

  test('a port in use is an error, not a hang', async () => {
    const first = await startOpsServer({
      listen: '127.0.0.1:0',
      registry: new Registry(),
      readinessChecks: () => [],
    });
    try {
      await assert.rejects(
        startOpsServer({
          listen: `127.0.0.1:${first.address.port}`,
          registry: new Registry(),
          readinessChecks: () => [],
        }),
        (err: unknown) =>
          err instanceof ConfigError && /cannot listen on 127\.0\.0\.1:\d+ \(EADDRINUSE\)/.test(err.message),
      );
    } finally {
      await first.close();
    }
  });
});
