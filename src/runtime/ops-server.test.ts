import assert from 'node:assert/strict';
import { get } from 'node:http';
import { describe, test } from 'node:test';
import { Counter, Registry } from 'prom-client';
import { ConfigError } from '../errors.ts';
import type { Logger } from '../log.ts';
import { eventually, holdPort, idleCrowd } from '../net/testing.ts';
import { FakeClock } from '../testing/fake-clock.ts';
import { capturedLogger } from '../testing/log-capture.ts';
import { metricsReuseMs, type ReadinessCheck, startOpsServer } from './ops-server.ts';

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

  test('a port in use is a config error naming the port and the setting, not a hang', async () => {
    const taken = await holdPort();
    try {
      await assert.rejects(
        startOpsServer({
          listen: `127.0.0.1:${taken.port}`,
          registry: new Registry(),
          readinessChecks: () => [],
        }),
        (err: unknown) => {
          assert.ok(err instanceof ConfigError);
          assert.equal(
            err.message,
            `cannot listen on 127.0.0.1:${taken.port}: port ${taken.port} is already in use (EADDRINUSE); ` +
              'choose another address in metrics.listen',
          );
          return true;
        },
      );
    } finally {
      await taken.release();
    }
  });

  test('idle connections that never send a byte are closed after the idle timeout; the count returns to zero', async () => {
    const server = await startOpsServer({
      listen: '127.0.0.1:0',
      registry: new Registry(),
      readinessChecks: () => [],
      connectionLimits: { keepAliveTimeout: 1_000, maxConnectionsPerSource: 1_000, maxConnections: 3_000 },
    });
    const sources = Array.from({ length: 10 }, (_, i) => `127.0.2.${i + 1}`);
    const crowd = await idleCrowd(server.address.port, 2_000, sources);
    try {
      assert.equal(crowd.sockets.filter((s) => s.connected).length, 2_000);
      await crowd.settled(15_000);
      assert.equal(crowd.open().length, 0, 'every idle connection was closed');
      assert.ok(crowd.sockets.every((s) => !s.closedByUs));
      assert.equal(await eventually(() => server.openConnections(), 0), 0);
    } finally {
      await crowd.release();
      await server.close();
    }
  });

  test('a source over its cap is refused as it connects; /healthz from another source is served', async () => {
    const registry = new Registry();
    const server = await startOpsServer({
      listen: '127.0.0.1:0',
      registry,
      readinessChecks: () => [],
      connectionLimits: { maxConnectionsPerSource: 20 },
    });
    const crowd = await idleCrowd(server.address.port, 1_000, ['127.0.0.3']);
    try {
      try {
        assert.equal(await eventually(() => crowd.open().length, 20), 20);
        assert.ok(crowd.sockets.every((s) => !s.closedByUs));
        const health = await new Promise<number>((resolve, reject) => {
          get(`${server.url}/healthz`, { localAddress: '127.0.0.2', agent: false }, (res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
          }).on('error', reject);
        });
        assert.equal(health, 200);
        assert.match(
          await registry.metrics(),
          /^kops_controller_connections_refused_total\{server="operations",reason="per-source"\} 980$/m,
        );
      } finally {
        await crowd.release();
      }
      assert.equal(await eventually(() => server.openConnections(), 0), 0);
    } finally {
      // Closed whatever failed above: an open server would keep the test file from ever ending.
      await server.close();
    }
  });

  test("attack: remote clients filling the cap cannot lock out this machine's own clients (the kubelet's liveness probe)", async () => {
    const server = await startOpsServer({
      listen: '127.0.0.1:0',
      registry: new Registry(),
      readinessChecks: () => [],
      connectionLimits: { maxConnections: 40, maxConnectionsPerSource: 10, keepAliveTimeout: 60_000 },
      // On loopback every address is this machine's: say which one stands for the node's own.
      fromThisMachine: (source) => source === '127.0.0.9',
    });
    const probe = (localAddress: string) =>
      new Promise<number>((resolve, reject) => {
        get(`${server.url}/healthz`, { localAddress, agent: false }, (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        }).on('error', reject);
      });
    const crowd = await idleCrowd(server.address.port, 200, [
      '127.0.3.1',
      '127.0.3.2',
      '127.0.3.3',
      '127.0.3.4',
      '127.0.3.5',
    ]);
    try {
      try {
        assert.equal(await eventually(() => crowd.open().length, 40), 40);
        await assert.rejects(probe('127.0.0.2'), 'a remote source beyond the cap is refused');
        assert.equal(await probe('127.0.0.9'), 200);
      } finally {
        await crowd.release();
      }
      assert.equal(await eventually(() => server.openConnections(), 0), 0);
    } finally {
      // Closed whatever failed above: an open server would keep the test file from ever ending.
      await server.close();
    }
  });
});

/**
 * A registry that counts its expositions: each one includes `test_builds_total`, the number of the
 * build it came from, so a body says which build served it. `failNext` makes the next build throw;
 * `hold` makes builds wait until the returned function is called.
 */
function countingRegistry() {
  const registry = new Registry();
  const builds = new Counter({
    name: 'test_builds_total',
    help: 'Expositions built.',
    registers: [registry],
  });
  const own = registry.metrics.bind(registry);
  const state = { builds: 0, failNext: false, gate: Promise.resolve() };
  registry.metrics = async () => {
    state.builds++;
    builds.inc();
    await state.gate;
    if (state.failNext) {
      state.failNext = false;
      throw new Error('a worker answered garbage');
    }
    return own();
  };
  const hold = () => {
    let release = () => {};
    state.gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    return release;
  };
  return { registry, state, hold };
}

async function scrape(url: string, method = 'GET') {
  const res = await fetch(`${url}/metrics`, { method });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

/** An operations server over `registry` whose exposition reuse is timed by `clock`. */
function metricsServer(registry: Registry, clock: FakeClock, logger?: Logger) {
  return startOpsServer({
    listen: '127.0.0.1:0',
    registry,
    readinessChecks: () => [],
    clock,
    ...(logger ? { logger } : {}),
  });
}

describe('operations server: /metrics under many callers (red team 3, finding 1)', () => {
  test('concurrent scrapes share one build: twenty callers, one exposition', async () => {
    const { registry, state, hold } = countingRegistry();
    const server = await metricsServer(registry, new FakeClock());
    try {
      const release = hold();
      const scrapes = Array.from({ length: 20 }, () => scrape(server.url));
      // The first build waits until every caller is connected: the others arrive while it runs.
      await eventually(() => server.openConnections() >= 20, true);
      release();
      const answers = await Promise.all(scrapes);
      assert.equal(state.builds, 1, 'one build served every caller');
      for (const answer of answers) {
        assert.equal(answer.status, 200);
        assert.match(answer.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
        assert.match(answer.text, /^test_builds_total 1$/m);
      }
    } finally {
      await server.close();
    }
  });

  test('a finished exposition is reused for metricsReuseMs, then built again', async () => {
    const { registry, state } = countingRegistry();
    const clock = new FakeClock();
    const server = await metricsServer(registry, clock);
    try {
      assert.match((await scrape(server.url)).text, /^test_builds_total 1$/m);
      await clock.advance(metricsReuseMs - 1);
      const again = await scrape(server.url);
      assert.equal(again.status, 200);
      assert.match(again.text, /^test_builds_total 1$/m, 'the same exposition, within the interval');
      assert.equal(state.builds, 1);
      await clock.advance(1);
      assert.match((await scrape(server.url)).text, /^test_builds_total 2$/m, 'a new one after it');
      assert.equal(state.builds, 2);
    } finally {
      await server.close();
    }
  });

  test('a build that throws answers 500 as before and is not reused: the next scrape builds again', async () => {
    const { registry, state } = countingRegistry();
    const { logger, lines } = capturedLogger();
    const server = await metricsServer(registry, new FakeClock(), logger);
    try {
      state.failNext = true;
      const failed = await scrape(server.url);
      assert.equal(failed.status, 500);
      assert.equal(failed.text, 'internal error\n');
      assert.ok(
        lines.some(
          (line) => line.includes('operations endpoint failed') && line.includes('a worker answered garbage'),
        ),
        lines.join(''),
      );
      // The clock has not moved: a cached failure, or a cached nothing, would answer now.
      const next = await scrape(server.url);
      assert.equal(next.status, 200);
      assert.match(next.text, /^test_builds_total 2$/m);
      assert.equal(state.builds, 2);
    } finally {
      await server.close();
    }
  });

  test('HEAD /metrics answers the headers of a scrape and builds nothing', async () => {
    const { registry, state } = countingRegistry();
    const server = await metricsServer(registry, new FakeClock());
    try {
      // Nothing is built yet, so no exposition could be reused: a HEAD that built would count.
      const heads = [];
      for (let i = 0; i < 50; i++) heads.push(await scrape(server.url, 'HEAD'));
      assert.equal(state.builds, 0, 'no HEAD built an exposition');
      const get = await scrape(server.url);
      for (const head of heads) {
        assert.equal(head.status, 200);
        assert.equal(head.text, '');
        assert.equal(head.headers.get('content-type'), get.headers.get('content-type'));
        assert.equal(head.headers.get('cache-control'), 'no-store');
      }
      assert.equal(state.builds, 1, 'only the GET built');
    } finally {
      await server.close();
    }
  });
});
