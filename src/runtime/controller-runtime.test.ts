import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { CoordinationV1Api, type V1Lease } from '@kubernetes/client-node';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { parseConfig } from '../config/loader.ts';
import { InternalError } from '../errors.ts';
import { leaderRecordOf } from '../kube/leader-election.ts';
import { startApiServer } from '../sim/apiserver/index.ts';
import { FakeClock, settle } from '../testing/fake-clock.ts';
import { FakeLeaseApi } from '../testing/fake-lease-api.ts';
import { capturedLogger } from '../testing/log-capture.ts';
import { ControllerRuntime, informerSynced, type LeaderComponent } from './controller-runtime.ts';

const config = (leaderElection: Record<string, unknown> = {}) =>
  parseConfig({
    clusterName: 'c.example.com',
    cloud: 'metal',
    metrics: { listen: '127.0.0.1:0' },
    leaderElection,
  });

/** A component that records its runs; `stubborn` ignores the abort signal. */
function testComponent(name: string, behaviour: { failTimes?: number; stubborn?: boolean } = {}) {
  const log: string[] = [];
  let failures = behaviour.failTimes ?? 0;
  let running = false;
  const component: LeaderComponent = {
    name,
    start: (signal) =>
      new Promise((resolve, reject) => {
        running = true;
        log.push('start');
        if (failures > 0) {
          failures--;
          running = false;
          log.push('fail');
          reject(new Error('cloud API unreachable'));
          return;
        }
        if (behaviour.stubborn) return;
        signal.addEventListener('abort', () => {
          running = false;
          log.push('stop');
          resolve();
        });
      }),
  };
  return { component, log, isRunning: () => running };
}

/** A component that takes `stopMs` on `clock` to stop after its signal aborts (a slow but honest one). */
function slowToStop(clock: FakeClock, stopMs: number) {
  let running = false;
  const component: LeaderComponent = {
    name: 'slow',
    start: (signal) =>
      new Promise((resolve) => {
        running = true;
        signal.addEventListener('abort', () =>
          clock.setTimer(() => {
            running = false;
            resolve();
          }, stopMs),
        );
      }),
  };
  return { component, isRunning: () => running };
}

async function get(url: string): Promise<{ status: number; text: string }> {
  const res = await fetch(url);
  return { status: res.status, text: await res.text() };
}

describe('controller runtime', () => {
  test('components run only on the leader; shutdown stops them and hands the lease over', async () => {
    const api = new FakeLeaseApi();
    const clock = new FakeClock();
    const replicas = ['a', 'b'].map((identity) => {
      const registry = new Registry();
      const probe = testComponent('probe');
      const runtime = new ControllerRuntime({
        config: config(),
        leaseClient: api.clientFor(),
        components: [probe.component],
        registry,
        identity,
        clock,
        random: () => 0.5,
      });
      return { identity, runtime, probe, registry };
    });
    const [a, b] = replicas as [(typeof replicas)[0], (typeof replicas)[0]];
    const serverA = await a.runtime.start();
    await clock.advance(10);
    const serverB = await b.runtime.start();
    for (let i = 0; i < 40; i++) {
      await clock.advance(250);
      assert.ok(!(a.probe.isRunning() && b.probe.isRunning()), 'the component never runs on both replicas');
    }
    assert.equal(a.runtime.isLeader, true);
    assert.equal(b.runtime.isLeader, false);
    assert.deepEqual(a.probe.log, ['start']);
    assert.deepEqual(b.probe.log, []);

    for (const server of [serverA, serverB]) {
      assert.deepEqual(await get(`${server.url}/healthz`), { status: 200, text: 'ok\n' });
      const ready = await get(`${server.url}/readyz`);
      assert.equal(ready.status, 200, ready.text);
    }
    const metricsA = (await get(`${serverA.url}/metrics`)).text;
    assert.match(metricsA, /^leader_election_master_status\{name="kops-controller-leader"\} 1$/m);
    assert.match(metricsA, /^controller_component_running\{component="probe"\} 1$/m);
    assert.match(
      (await get(`${serverB.url}/metrics`)).text,
      /^controller_component_running\{component="probe"\} 0$/m,
    );

    await a.runtime.stop();
    await a.runtime.done;
    assert.deepEqual(a.probe.log, ['start', 'stop']);
    assert.equal(api.lease?.spec?.holderIdentity, '', 'released on shutdown');
    await assert.rejects(fetch(`${serverA.url}/healthz`), 'the server is closed');
    for (let i = 0; i < 20 && !b.probe.isRunning(); i++) await clock.advance(250);
    assert.deepEqual(b.probe.log, ['start'], 'the other replica took over without waiting for expiry');
    await b.runtime.stop();
    assert.deepEqual(b.probe.log, ['start', 'stop']);
  });

  test('a failing component is restarted with backoff while leading', async () => {
    const clock = new FakeClock();
    const flaky = testComponent('flaky', { failTimes: 2 });
    const registry = new Registry();
    const runtime = new ControllerRuntime({
      config: config(),
      leaseClient: new FakeLeaseApi().clientFor(),
      components: [flaky.component],
      registry,
      clock,
      random: () => 0,
    });
    await runtime.start();
    await clock.advance(10);
    assert.deepEqual(flaky.log, ['start', 'fail']);
    await clock.advance(1000);
    assert.deepEqual(flaky.log, ['start', 'fail', 'start', 'fail']);
    await clock.advance(1999);
    assert.equal(flaky.log.length, 4, 'the second restart waits 2 s');
    await clock.advance(1);
    assert.deepEqual(flaky.log.slice(4), ['start']);
    assert.equal(flaky.isRunning(), true);
    await runtime.stop();
    assert.equal(flaky.isRunning(), false);
  });

  test('a component that keeps failing is logged when it starts failing and every ten minutes, not at every restart', async (t) => {
    const clock = new FakeClock();
    const broken = testComponent('broken', { failTimes: 1_000 });
    const { logger, lines } = capturedLogger({ level: 'info' });
    const runtime = new ControllerRuntime({
      config: config(),
      leaseClient: new FakeLeaseApi().clientFor(),
      components: [broken.component],
      registry: new Registry(),
      clock,
      logger,
      random: () => 0,
    });
    await runtime.start();
    t.after(() => runtime.stop());
    for (let s = 0; s < 25 * 60; s++) await clock.advance(1000);
    const restarts = broken.log.filter((entry) => entry === 'fail').length;
    assert.ok(restarts > 40, `${restarts} restarts in 25 minutes (30 s apart at most)`);
    const failed = lines
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .filter((r) => r['component'] === 'broken' && r['msg'] !== 'stopped');
    assert.deepEqual(
      failed.map((r) => [r['level'], r['msg']]),
      [
        ['info', 'starting'],
        ['error', 'failed; restarting'],
        ['error', 'failed; restarting'],
        ['error', 'failed; restarting'],
      ],
    );
    assert.equal(failed[1]?.['err'], 'cloud API unreachable');
    assert.ok((failed[2]?.['repeated'] as number) > 10);
  });

  test("the old leader's components are gone before a standby can take the lease over", async () => {
    const api = new FakeLeaseApi();
    const clock = new FakeClock();
    const network: { hang?: boolean } = {};
    const exits: { code: number; at: number }[] = [];
    // Needs 9.5 s to stop: longer than the lease leaves it once the leader stops at renewDeadline.
    const slow = slowToStop(clock, 9_500);
    const a = new ControllerRuntime({
      config: config(),
      leaseClient: api.clientFor(network),
      components: [slow.component],
      registry: new Registry(),
      identity: 'a',
      clock,
      random: () => 0,
      exit: (code) => void exits.push({ code, at: clock.now() }),
    });
    const probe = testComponent('probe');
    const b = new ControllerRuntime({
      config: config(),
      leaseClient: api.clientFor(),
      components: [probe.component],
      registry: new Registry(),
      identity: 'b',
      clock,
      random: () => 0,
    });
    await a.start();
    const aDone = a.done.then(
      () => undefined,
      (err: unknown) => err,
    );
    await clock.advance(100);
    await b.start();
    for (let i = 0; i < 120; i++) await clock.advance(50);
    network.hang = true; // a's renewals stall from now on
    const lastRenewal = leaderRecordOf(api.lease!).renewTime!;
    for (let i = 0; i < 600; i++) {
      await clock.advance(50);
      const aActs = slow.isRunning() && exits.length === 0; // a process that exited runs nothing
      assert.ok(
        !(aActs && probe.isRunning()),
        `both replicas ran their components ${clock.now() - lastRenewal} ms after a's last renewal`,
      );
    }
    assert.ok(probe.isRunning(), 'b took over');
    assert.deepEqual(exits, [{ code: 70, at: lastRenewal + 13_500 }], 'a exited at 0.9 × leaseDuration');
    assert.equal(leaderRecordOf(api.lease!).leaseTransitions, 1);
    network.hang = false;
    await Promise.all([a.stop(), b.stop(), clock.advance(15_000)]);
    assert.ok((await aDone) instanceof InternalError);
  });

  test('a component that ignores its stop signal ends the process with 70 before the lease can expire', async () => {
    const api = new FakeLeaseApi();
    const clock = new FakeClock();
    const stubborn = testComponent('stubborn', { stubborn: true });
    const exits: { code: number; at: number }[] = [];
    const lines: string[] = [];
    const runtime = new ControllerRuntime({
      config: config(),
      leaseClient: api.clientFor(),
      components: [stubborn.component],
      registry: new Registry(),
      identity: 'a',
      clock,
      logger: pino({ level: 'error' }, { write: (line: string) => void lines.push(line) }),
      exit: (code) => void exits.push({ code, at: clock.now() }),
    });
    const server = await runtime.start();
    await clock.advance(10);
    assert.equal(runtime.isLeader, true);
    const lastRenewal = leaderRecordOf(api.lease!).renewTime!;
    const stopping = runtime.stop();
    await clock.advance(13_000);
    assert.deepEqual(exits, [], 'still within the stop budget');
    assert.deepEqual(await get(`${server.url}/healthz`), { status: 200, text: 'ok\n' });
    await clock.advance(1_000);
    // 0.9 × leaseDuration after the last renewal: before any standby can consider the lease expired.
    assert.deepEqual(exits, [{ code: 70, at: lastRenewal + 13_500 }]);
    assert.match(lines.join(''), /"components":\["stubborn"\].*stubborn did not stop/);
    await stopping;
    await assert.rejects(
      runtime.done,
      (err: unknown) => err instanceof InternalError && /stubborn/.test(err.message),
    );
    assert.equal(api.lease?.spec?.holderIdentity, 'a', 'left to expire, not handed over');
  });

  test('componentStopTimeoutMs shortens the stop budget; the lease is not released', async () => {
    const api = new FakeLeaseApi();
    const clock = new FakeClock();
    const stubborn = testComponent('stubborn', { stubborn: true });
    const exits: number[] = [];
    const runtime = new ControllerRuntime({
      config: config(),
      leaseClient: api.clientFor(),
      components: [stubborn.component],
      registry: new Registry(),
      identity: 'a',
      clock,
      componentStopTimeoutMs: 5_000,
      exit: (code) => void exits.push(code),
    });
    const server = await runtime.start();
    await clock.advance(10);
    assert.equal(runtime.isLeader, true);
    const stopping = runtime.stop();
    await clock.advance(4_999);
    assert.deepEqual(exits, []);
    await clock.advance(1);
    assert.deepEqual(exits, [70]);
    await stopping;
    await assert.rejects(
      runtime.done,
      (err: unknown) => err instanceof InternalError && /did not stop within 5000 ms/.test(err.message),
    );
    assert.equal(api.lease?.spec?.holderIdentity, 'a', 'left to expire, not handed over');
    await assert.rejects(fetch(`${server.url}/healthz`));
  });

  test('without leader election the components run at once; readiness includes added checks', async () => {
    const probe = testComponent('probe');
    let synced = false;
    const runtime = new ControllerRuntime({
      config: config({ enabled: false }),
      leaseClient: new FakeLeaseApi().clientFor({ down: true }),
      components: [probe.component],
      registry: new Registry(),
      clock: new FakeClock(),
    });
    runtime.addReadinessCheck(informerSynced({ name: 'nodes', hasSynced: () => synced }));
    const server = await runtime.start();
    await settle();
    assert.deepEqual(probe.log, ['start']);
    assert.equal(runtime.isLeader, true);
    assert.equal(runtime.identity, undefined);
    assert.deepEqual(await get(`${server.url}/readyz`), {
      status: 503,
      text: '[+]leader-election ok\n[-]informer-nodes failed: not synced yet\nreadyz check failed\n',
    });
    synced = true;
    assert.equal((await get(`${server.url}/readyz`)).status, 200);
    await runtime.stop();
    await runtime.done;
    assert.deepEqual(probe.log, ['start', 'stop']);
  });

  test('stop right after start ends cleanly, with or without leader election', async () => {
    for (const enabled of [true, false]) {
      const probe = testComponent('probe');
      const runtime = new ControllerRuntime({
        config: config({ enabled }),
        leaseClient: new FakeLeaseApi().clientFor(),
        components: [probe.component],
        registry: new Registry(),
        clock: new FakeClock(),
      });
      const server = runtime.start();
      await runtime.stop();
      await runtime.done;
      assert.equal(probe.isRunning(), false);
      await assert.rejects(fetch(`${(await server).url}/healthz`), 'already closed when stop resolved');
    }
  });

  test('not ready until the lease has been read', async () => {
    const clock = new FakeClock();
    const runtime = new ControllerRuntime({
      config: config(),
      leaseClient: new FakeLeaseApi().clientFor({ hang: true }),
      registry: new Registry(),
      clock,
    });
    const server = await runtime.start();
    const ready = await get(`${server.url}/readyz`);
    assert.equal(ready.status, 503);
    assert.match(ready.text, /^\[-\]leader-election failed: the leader lease has not been read yet$/m);
    const stopping = runtime.stop();
    await clock.advance(10_000);
    await stopping;
  });
});

describe('controller runtime against the simulated API server', () => {
  test('a test component runs only on the leader and moves when the leader shuts down', async () => {
    const sim = await startApiServer();
    const fast = { leaseDuration: '600ms', renewDeadline: '400ms', retryPeriod: '100ms' };
    const replicas = ['a', 'b'].map((identity) => {
      const probe = testComponent('probe');
      const runtime = new ControllerRuntime({
        config: config(fast),
        leaseClient: sim.kubeConfig().makeApiClient(CoordinationV1Api),
        components: [probe.component],
        registry: new Registry(),
        identity,
      });
      return { identity, probe, runtime };
    });
    let overlap = false;
    const sampler = setInterval(() => {
      if (replicas.every((r) => r.probe.isRunning())) overlap = true;
    }, 5);
    const waitFor = async (condition: () => boolean, what: string) => {
      for (let i = 0; i < 1000 && !condition(); i++) await new Promise((r) => setTimeout(r, 10));
      assert.ok(condition(), `timed out waiting for ${what}`);
    };
    try {
      const servers = await Promise.all(replicas.map((r) => r.runtime.start()));
      await waitFor(() => replicas.some((r) => r.probe.isRunning()), 'a leader');
      const leader = replicas.find((r) => r.probe.isRunning())!;
      const standby = replicas.find((r) => r !== leader)!;
      for (const server of servers) {
        let ready = await get(`${server.url}/readyz`);
        for (let i = 0; i < 100 && ready.status !== 200; i++) ready = await get(`${server.url}/readyz`);
        assert.equal(ready.status, 200, ready.text);
      }
      await leader.runtime.stop();
      await leader.runtime.done;
      assert.deepEqual(leader.probe.log, ['start', 'stop']);
      await waitFor(() => standby.probe.isRunning(), 'the standby to take over');
      const lease = sim.store.get('leases', 'kube-system', 'kops-controller-leader') as V1Lease;
      assert.equal(lease.spec?.holderIdentity, standby.identity);
      assert.equal(overlap, false, 'the component never ran on both replicas at a sampled instant');
    } finally {
      clearInterval(sampler);
      await Promise.all(replicas.map((r) => r.runtime.stop()));
      await sim.close();
    }
  });
});
