import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ApiException, CoordinationV1Api, type V1Lease } from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import { ConfigError } from '../errors.ts';
import { type Clock, sleep } from '../runtime/clock.ts';
import { startApiServer } from '../sim/apiserver/index.ts';
import { FakeClock, settle } from '../testing/fake-clock.ts';
import { FakeLeaseApi } from '../testing/fake-lease-api.ts';
import { capturedLogger } from '../testing/log-capture.ts';
import { LeaderElector, type LeaseClient, leaderRecordOf, parseMicroTime } from './leader-election.ts';

const timings = { leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 2_000 };

function candidate(
  api: FakeLeaseApi,
  clock: Clock,
  identity: string,
  network: { down?: boolean; hang?: boolean } = {},
  registry?: Registry,
) {
  const events: string[] = [];
  const abort = new AbortController();
  const elector = new LeaderElector({
    client: api.clientFor(network),
    namespace: 'kube-system',
    name: 'kops-controller-leader',
    identity,
    ...timings,
    clock,
    registry,
    random: () => 0.5,
    onStartedLeading: (signal) => {
      events.push('started');
      signal.addEventListener('abort', () => events.push('signal-aborted'));
    },
    onStoppedLeading: () => {
      events.push('stopped');
    },
    onNewLeader: (leader) => events.push(`leader:${leader}`),
  });
  const done = elector.run(abort.signal);
  return { elector, events, network, stop: () => abort.abort(), done };
}

/** Advances the clock in small steps, failing if two candidates ever lead at once. */
async function advanceChecking(clock: FakeClock, ms: number, ...electors: LeaderElector[]): Promise<void> {
  for (let t = 0; t < ms; t += 50) {
    await clock.advance(50);
    const leaders = electors.filter((e) => e.isLeader).map((e) => e.identity);
    assert.ok(leaders.length <= 1, `two leaders at once: ${leaders.join(', ')}`);
  }
}

describe('leader election', () => {
  test('of two candidates exactly one leads; the create race ends in a 409, not two leaders', async () => {
    const api = new FakeLeaseApi();
    const clock = new FakeClock();
    const a = candidate(api, clock, 'a');
    const b = candidate(api, clock, 'b');
    await advanceChecking(clock, 30_000, a.elector, b.elector);
    const leaders = [a, b].filter((c) => c.elector.isLeader);
    assert.equal(leaders.length, 1);
    assert.ok(api.conflicts >= 1, 'the loser of the race got a conflict');
    const leader = leaders[0]!;
    const other = leader === a ? b : a;
    assert.deepEqual(leader.events, [`leader:${leader.elector.identity}`, 'started']);
    assert.deepEqual(other.events, [`leader:${leader.elector.identity}`]);
    assert.equal(other.elector.leader, leader.elector.identity);
    assert.ok(api.writes.length >= 15, 'the leader renews every retryPeriod');
    a.stop();
    b.stop();
    await clock.advance(1000);
    await Promise.all([a.done, b.done]);
  });

  test('writes MicroTimes with 6 fractional digits and reads them back from strings', async () => {
    const api = new FakeLeaseApi();
    const clock = new FakeClock(Date.parse('2026-11-22T01:02:03.456Z'));
    const a = candidate(api, clock, 'a');
    await clock.advance(10);
    const spec = api.lease?.spec as unknown as Record<string, unknown>;
    assert.equal(spec['renewTime'], '2026-11-22T01:02:03.456000Z');
    assert.equal(spec['acquireTime'], '2026-11-22T01:02:03.456000Z');
    assert.equal(spec['leaseDurationSeconds'], 15);
    assert.equal(spec['leaseTransitions'], 0);
    assert.equal(parseMicroTime('2026-11-22T01:02:03.456789Z'), Date.parse('2026-11-22T01:02:03.456Z'));
    assert.equal(parseMicroTime(new Date(5)), 5);
    assert.equal(parseMicroTime('not a time'), undefined);
    assert.equal(leaderRecordOf(api.lease!).renewTime, clock.now() - 10);
    a.stop();
    await a.done;
  });

  test('a partitioned leader steps down by renewDeadline; the other takes over after the lease expires', async () => {
    const api = new FakeLeaseApi();
    const clock = new FakeClock();
    const a = candidate(api, clock, 'a');
    await clock.advance(10);
    assert.equal(a.elector.isLeader, true);
    const b = candidate(api, clock, 'b');
    await advanceChecking(clock, 5_000, a.elector, b.elector);
    assert.equal(b.elector.leader, 'a');

    a.network.down = true;
    const cutAt = clock.now();
    let aStepDown: number | undefined;
    let bTakeOver: number | undefined;
    for (let t = 0; t < 30_000; t += 50) {
      await advanceChecking(clock, 50, a.elector, b.elector);
      if (aStepDown === undefined && !a.elector.isLeader) aStepDown = clock.now() - cutAt;
      if (bTakeOver === undefined && b.elector.isLeader) bTakeOver = clock.now() - cutAt;
    }
    assert.ok(
      aStepDown !== undefined && aStepDown <= timings.renewDeadlineMs,
      `stepped down after ${aStepDown} ms`,
    );
    assert.deepEqual(a.events.slice(-2), ['signal-aborted', 'stopped']);
    // b first sees the last renewal up to one (jittered) retry period after it, then waits a lease duration.
    assert.ok(bTakeOver !== undefined, 'b took over');
    assert.ok(
      bTakeOver >= timings.leaseDurationMs - timings.retryPeriodMs,
      `took over after ${bTakeOver} ms`,
    );
    assert.ok(
      bTakeOver <= timings.leaseDurationMs + 2 * 2.2 * timings.retryPeriodMs,
      `took over after ${bTakeOver} ms`,
    );
    assert.equal(leaderRecordOf(api.lease!).leaseTransitions, 1);

    // The old leader's network comes back: it campaigns again and sees b leading.
    a.network.down = false;
    await advanceChecking(clock, 10_000, a.elector, b.elector);
    assert.equal(b.elector.isLeader, true);
    assert.equal(a.elector.leader, 'b');
    a.stop();
    b.stop();
    await clock.advance(5_000);
    await Promise.all([a.done, b.done]);
  });

  test('a standby cut off from the API server counts its lease errors; losing to the leader is not one', async () => {
    const api = new FakeLeaseApi();
    const clock = new FakeClock();
    const registry = new Registry();
    const a = candidate(api, clock, 'a');
    await clock.advance(10);
    const b = candidate(api, clock, 'b', {}, registry);
    const errors = async () =>
      Number(
        /^leader_election_lease_errors_total\{name="kops-controller-leader"\} (\d+)$/m.exec(
          await registry.metrics(),
        )?.[1] ?? 0,
      );
    await advanceChecking(clock, 10_000, a.elector, b.elector);
    assert.equal(await errors(), 0, 'a standby that sees the lease held is healthy');
    b.network.down = true;
    await advanceChecking(clock, 10_000, a.elector, b.elector);
    assert.ok((await errors()) >= 3, `${await errors()} errors in 10 s of retries every 2 s`);
    assert.doesNotMatch(
      await registry.metrics(),
      /^leader_election_renew_failures_total\{[^}]*\} [1-9]/m,
      'a standby renews nothing, so the renewal counter cannot show it',
    );
    // Cut off the other way: nothing answers. Each attempt that gets no answer is one error, however
    // its cut-short request ends.
    b.network.down = false;
    b.network.hang = true;
    const before = await errors();
    await advanceChecking(clock, 60_000, a.elector, b.elector);
    const attempts = (await errors()) - before;
    // One attempt every retry period (2 s, up to 20 % more) after a renewDeadline (10 s) without answer.
    assert.ok(attempts >= 4 && attempts <= 6, `${attempts} errors for 60 s of attempts that never answer`);
    a.stop();
    b.stop();
    // b's read in flight never answers, even to its abort: its attempt ends at its deadline.
    await clock.advance(15_000);
    await Promise.all([a.done, b.done]);
  });

  test('a Lease write the API server never answers is one error, not two (the deadline, then the cut-short request)', async () => {
    const clock = new FakeClock();
    const registry = new Registry();
    /** The signal abortingWith() puts on a request, read back from its middleware. */
    const signalOf = (options: unknown) => {
      let signal: AbortSignal | undefined;
      const middleware = (options as { middleware?: { pre(ctx: unknown): unknown }[] } | undefined)
        ?.middleware;
      for (const m of middleware ?? []) m.pre({ setSignal: (s: AbortSignal) => (signal = s) });
      return signal;
    };
    let writes = 0;
    const client = {
      readNamespacedLease: async () => {
        await settle();
        throw new ApiException(404, 'not found', JSON.stringify({ kind: 'Status', code: 404 }), {});
      },
      // Sent, never answered: the request rejects when its signal aborts, as client-node's does.
      createNamespacedLease: (_params: unknown, options: unknown) => {
        writes++;
        const signal = signalOf(options);
        return new Promise<V1Lease>((_resolve, reject) => {
          signal?.addEventListener('abort', () => reject(new DOMException('aborted', 'AbortError')));
        });
      },
      replaceNamespacedLease: async () => {
        throw new Error('unused');
      },
    } as unknown as LeaseClient;
    const abort = new AbortController();
    const elector = new LeaderElector({
      client,
      namespace: 'kube-system',
      name: 'l',
      identity: 'a',
      ...timings,
      clock,
      registry,
      random: () => 0.5,
      onStartedLeading: () => assert.fail('no write was ever answered'),
    });
    const done = elector.run(abort.signal);
    for (let t = 0; t < 60_000; t += 100) await clock.advance(100);
    abort.abort();
    await clock.advance(15_000);
    await done;
    const errors = Number(
      /^leader_election_lease_errors_total\{name="l"\} (\d+)$/m.exec(await registry.metrics())?.[1] ?? 0,
    );
    assert.ok(writes >= 4);
    assert.equal(errors, writes, 'each unanswered write is one error');
  });

  test('a standby whose wall clock steps forward does not take a lease that is still valid', async () => {
    const api = new FakeLeaseApi();
    const clock = new FakeClock();
    const a = candidate(api, clock, 'a');
    await clock.advance(10);
    // b's own wall clock, which an NTP step or `date -s` moves; its monotonic clock and timers do not move.
    let step = 0;
    const bClock: Clock = {
      now: () => clock.now() + step,
      monotonic: () => clock.monotonic(),
      setTimer: (fn, ms) => clock.setTimer(fn, ms),
    };
    const b = candidate(api, bClock, 'b');
    await advanceChecking(clock, 5_000, a.elector, b.elector);
    a.network.hang = true; // a's renewals stall; it still leads until renewDeadline after the last one
    const stalledAt = clock.now();
    // b reads the last renewal within one jittered retry, then its wall clock jumps while a still leads.
    await advanceChecking(clock, 4_000, a.elector, b.elector);
    step = 14_000;
    let bTakeOver: number | undefined;
    for (let t = 0; t < 30_000; t += 50) {
      await advanceChecking(clock, 50, a.elector, b.elector);
      if (bTakeOver === undefined && b.elector.isLeader) bTakeOver = clock.now() - stalledAt;
    }
    assert.ok(bTakeOver !== undefined, 'b took over once the lease had expired');
    assert.ok(
      bTakeOver >= timings.leaseDurationMs - timings.retryPeriodMs,
      `took over after ${bTakeOver} ms`,
    );
    // What b writes into the Lease is its wall time, stepped as it is.
    assert.equal(leaderRecordOf(api.lease!).holderIdentity, 'b');
    assert.ok(leaderRecordOf(api.lease!).renewTime! > clock.now() + step - 5_000, 'renewTime is wall time');
    a.network.hang = false;
    a.stop();
    b.stop();
    await clock.advance(15_000);
    await Promise.all([a.done, b.done]);
  });

  test('a slow read dates the renewal it returns from its answer, as client-go: no take-over while the holder may still lead', async () => {
    const api = new FakeLeaseApi();
    const clock = new FakeClock();
    const holder = candidate(api, clock, 'holder');
    await clock.advance(10);
    // The standby's reads sent in the 9.5 s before the holder's last renewal are answered only 100 ms
    // after it (its API server stalled during a control-plane roll); later reads are fast.
    const inner = api.clientFor();
    let lastRenewal = Number.POSITIVE_INFINITY;
    const slow: LeaseClient = {
      readNamespacedLease: async (args) => {
        const sent = clock.monotonic();
        if (sent >= lastRenewal - 9_500 && sent < lastRenewal) await sleep(clock, lastRenewal + 100 - sent);
        return inner.readNamespacedLease(args);
      },
      createNamespacedLease: (args) => inner.createNamespacedLease(args),
      replaceNamespacedLease: (args) => inner.replaceNamespacedLease(args),
    } as LeaseClient;
    const abort = new AbortController();
    const standby = new LeaderElector({
      client: slow,
      namespace: 'kube-system',
      name: 'kops-controller-leader',
      identity: 'standby',
      ...timings,
      clock,
      random: () => 0.5,
      onStartedLeading: () => undefined,
    });
    const standbyDone = standby.run(abort.signal);
    await advanceChecking(clock, 20_000, holder.elector, standby);
    // The holder renews for 10 s more (every retry period), then is cut off.
    lastRenewal = clock.monotonic() + 10_000;
    await advanceChecking(clock, 10_010, holder.elector, standby);
    holder.network.down = true;
    const renewedAt = leaderRecordOf(api.lease!).renewTime!;
    let takeOver: number | undefined;
    for (let t = 0; t < 40_000 && takeOver === undefined; t += 50) {
      await advanceChecking(clock, 50, holder.elector, standby);
      if (standby.isLeader) takeOver = clock.now() - renewedAt;
    }
    assert.ok(takeOver !== undefined, 'the standby took over once the lease had expired');
    assert.ok(
      takeOver >= timings.leaseDurationMs,
      `took over ${takeOver} ms after the last renewal it saw; the lease lasts ${timings.leaseDurationMs} ms`,
    );
    holder.network.down = false;
    holder.stop();
    abort.abort();
    await clock.advance(15_000);
    await Promise.all([holder.done, standbyDone]);
  });

  test('a wall-clock step does not move leadership; it only dates what is written', async () => {
    const api = new FakeLeaseApi();
    const clock = new FakeClock();
    const a = candidate(api, clock, 'a');
    await clock.advance(10);
    const b = candidate(api, clock, 'b');
    await advanceChecking(clock, 5_000, a.elector, b.elector);
    clock.stepWall(3_600_000); // an hour forward on both machines, while a keeps renewing
    await advanceChecking(clock, 20_000, a.elector, b.elector);
    clock.stepWall(-7_200_000); // and two hours back
    await advanceChecking(clock, 20_000, a.elector, b.elector);
    assert.equal(a.elector.isLeader, true);
    assert.equal(b.elector.leader, 'a');
    assert.deepEqual(a.events, ['leader:a', 'started'], 'a never stepped down');
    assert.equal(leaderRecordOf(api.lease!).leaseTransitions, 0);
    const renewTime = leaderRecordOf(api.lease!).renewTime!;
    assert.ok(clock.now() - renewTime >= 0 && clock.now() - renewTime <= timings.retryPeriodMs, 'wall time');
    a.stop();
    b.stop();
    await clock.advance(5_000);
    await Promise.all([a.done, b.done]);
  });

  test('onStoppedLeading is told to stop by 0.9 × leaseDuration after the last renewal', async () => {
    const api = new FakeLeaseApi();
    const clock = new FakeClock();
    const network: { hang?: boolean } = {};
    const deadlines: number[] = [];
    let renewedAt = 0;
    const elector = new LeaderElector({
      client: api.clientFor(network),
      namespace: 'kube-system',
      name: 'kops-controller-leader',
      identity: 'a',
      ...timings,
      clock,
      onStartedLeading: () => {},
      onStoppedLeading: ({ stopBy }) => void deadlines.push(stopBy - renewedAt),
    });
    const abort = new AbortController();
    const done = elector.run(abort.signal);
    for (let i = 0; i < 100; i++) await clock.advance(50);
    network.hang = true;
    renewedAt = clock.monotonic() - (clock.now() - leaderRecordOf(api.lease!).renewTime!);
    await clock.advance(timings.renewDeadlineMs);
    assert.deepEqual(deadlines, [0.9 * timings.leaseDurationMs]);
    network.hang = false;
    abort.abort();
    await clock.advance(timings.renewDeadlineMs);
    await done;
  });

  test('refuses timings that leave the leader no time to stop before the lease expires', () => {
    for (const renewDeadlineMs of [13_500, 14_000, 15_000]) {
      assert.throws(
        () =>
          new LeaderElector({
            client: new FakeLeaseApi().clientFor(),
            namespace: 'kube-system',
            name: 'kops-controller-leader',
            ...timings,
            renewDeadlineMs,
            onStartedLeading: () => {},
          }),
        (err: unknown) => err instanceof ConfigError && /0\.9 × leaseDuration \(13500 ms\)/.test(err.message),
      );
    }
  });

  test('shutdown during acquisition ends the run: a read in flight is given up, writing nothing', async () => {
    const api = new FakeLeaseApi();
    const clock = new FakeClock();
    const a = candidate(api, clock, 'a');
    a.stop(); // the read is on its way
    await clock.advance(10);
    await a.done;
    assert.equal(a.elector.isLeader, false);
    assert.equal(api.lease, undefined, 'no lease written');
    assert.deepEqual(a.events, [], 'nothing was started');
  });

  test('shutdown while the create is on its way lets it finish, then releases the lease', async () => {
    const api = new FakeLeaseApi();
    const clock = new FakeClock();
    const clientFor = api.clientFor.bind(api);
    let shutDown = () => {};
    api.clientFor = (network) => {
      const client = clientFor(network);
      return {
        ...client,
        createNamespacedLease: (...args: Parameters<LeaseClient['createNamespacedLease']>) => {
          shutDown();
          return client.createNamespacedLease(...args);
        },
      } as LeaseClient;
    };
    const a = candidate(api, clock, 'a');
    shutDown = a.stop;
    await clock.advance(10);
    await a.done;
    assert.equal(a.elector.isLeader, false);
    assert.equal(api.lease?.spec?.holderIdentity, '', 'acquired, then released at once');
    assert.deepEqual(a.events, ['leader:a'], 'nothing was started');
  });

  test('a renewal that hangs does not keep a leader past renewDeadline', async () => {
    const api = new FakeLeaseApi();
    const clock = new FakeClock();
    const a = candidate(api, clock, 'a');
    await clock.advance(10);
    const leadingSince = clock.now() - 10;
    a.network.hang = true;
    await clock.advance(timings.renewDeadlineMs - 20);
    assert.equal(a.elector.isLeader, true);
    await clock.advance(20);
    assert.equal(
      a.elector.isLeader,
      false,
      `still leading ${clock.now() - leadingSince} ms after the last renewal`,
    );
    assert.ok(a.events.includes('stopped'));
    a.stop();
    await clock.advance(timings.renewDeadlineMs);
  });

  test('shutdown releases the lease so the other candidate takes over at its next retry', async () => {
    const api = new FakeLeaseApi();
    const clock = new FakeClock();
    const registry = new Registry();
    const a = candidate(api, clock, 'a', {}, registry);
    await clock.advance(10);
    const b = candidate(api, clock, 'b');
    await advanceChecking(clock, 3_000, a.elector, b.elector);
    assert.match(
      await registry.metrics(),
      /leader_election_master_status\{name="kops-controller-leader"\} 1/,
    );

    a.stop();
    await a.done;
    assert.deepEqual(a.events.slice(-2), ['signal-aborted', 'stopped']);
    assert.equal(api.lease?.spec?.holderIdentity, '');
    assert.match(
      await registry.metrics(),
      /leader_election_master_status\{name="kops-controller-leader"\} 0/,
    );
    const releasedAt = clock.now();
    while (!b.elector.isLeader) await advanceChecking(clock, 50, a.elector, b.elector);
    assert.ok(clock.now() - releasedAt <= 2.2 * timings.retryPeriodMs, 'no wait for the lease to expire');
    assert.equal(leaderRecordOf(api.lease!).leaseTransitions, 1);
    assert.ok(b.events.includes('leader:b'));
    b.stop();
    await clock.advance(100);
    await b.done;
  });
});

describe('leader election logs while the API server is down', () => {
  test('a failing lease request is written when it starts, every ten minutes, and once when the API server answers again: not at every retry', async () => {
    const api = new FakeLeaseApi();
    const clock = new FakeClock();
    const { logger, lines } = capturedLogger();
    const network: { down?: boolean } = {};
    const abort = new AbortController();
    const elector = new LeaderElector({
      client: api.clientFor(network),
      namespace: 'kube-system',
      name: 'kops-controller-leader',
      identity: 'a',
      ...timings,
      clock,
      logger,
      random: () => 0.5,
      onStartedLeading: () => {},
    });
    const done = elector.run(abort.signal);
    const written = (msg: string) =>
      lines.map((line) => JSON.parse(line) as Record<string, unknown>).filter((r) => r['msg'] === msg);
    try {
      await clock.advance(10);
      assert.equal(elector.isLeader, true);
      network.down = true;
      // 25 minutes down: the leader steps down, and both its renewals and its campaign retry every
      // few seconds, several hundred failed reads in all.
      for (let t = 0; t < 25 * 60_000; t += 1_000) await clock.advance(1_000);
      const warnings = lines
        .map((line) => JSON.parse(line) as Record<string, unknown>)
        .filter((r) => r['level'] === 'warn' && String(r['msg']).startsWith('lease'));
      assert.equal(warnings.length, 3, `${warnings.length} lease warnings in 25 minutes`);
      const failed = written('lease request failed');
      assert.deepEqual(
        failed.map((r) => [r['level'], r['action'], r['err']]),
        [
          ['warn', 'read', 'fetch failed'],
          ['warn', 'read', 'fetch failed'],
          ['warn', 'read', 'fetch failed'],
        ],
        'at 0, 10 and 20 minutes',
      );
      assert.equal(failed[0]?.['failures'], 1);
      const total = Number(failed[2]?.['failures']);
      assert.ok(total > 300, `${total} failed reads in a row`);
      assert.ok(Number(failed[2]?.['repeated']) > 100, 'the count of those held back');
      network.down = false;
      for (let t = 0; t < 5_000; t += 100) await clock.advance(100);
      const recovered = written('lease requests answered again');
      assert.equal(recovered.length, 1);
      assert.equal(recovered[0]?.['level'], 'info');
      assert.ok(Number(recovered[0]?.['failures']) >= total);
      assert.equal(elector.isLeader, true, 'leads again');
    } finally {
      abort.abort();
      await clock.advance(1_000);
      await done;
    }
  });
});

describe('leader election against the simulated API server', () => {
  const fast = { leaseDurationMs: 600, renewDeadlineMs: 400, retryPeriodMs: 100 };

  /** A real Lease client whose network this test can cut, as a partition would. */
  function partitionable(client: CoordinationV1Api) {
    const network = { down: false };
    const guard =
      <A, R>(call: (arg: A) => Promise<R>) =>
      (arg: A) =>
        network.down ? Promise.reject(new TypeError('fetch failed')) : call(arg);
    const lease: LeaseClient = {
      readNamespacedLease: guard((a) => client.readNamespacedLease(a)),
      createNamespacedLease: guard((a) => client.createNamespacedLease(a)),
      replaceNamespacedLease: guard((a) => client.replaceNamespacedLease(a)),
    };
    return { lease, network };
  }

  test('one leader at a time through conflicts, a partitioned leader, and a release', async () => {
    const sim = await startApiServer();
    const coordination = sim.kubeConfig().makeApiClient(CoordinationV1Api);
    const candidates = ['a', 'b'].map((identity) => {
      const { lease, network } = partitionable(coordination);
      const abort = new AbortController();
      const elector = new LeaderElector({
        client: lease,
        namespace: 'kube-system',
        name: 'kops-controller-leader',
        identity,
        ...fast,
        onStartedLeading: () => {},
      });
      return { identity, elector, network, abort, done: elector.run(abort.signal) };
    });
    let overlap = false;
    const sampler = setInterval(() => {
      if (candidates.every((c) => c.elector.isLeader)) overlap = true;
    }, 5);
    const leaderOf = () => candidates.find((c) => c.elector.isLeader);
    const waitFor = async (condition: () => boolean, what: string) => {
      for (let i = 0; i < 1000 && !condition(); i++) await new Promise((r) => setTimeout(r, 10));
      assert.ok(condition(), `timed out waiting for ${what}`);
    };
    try {
      await waitFor(() => leaderOf() !== undefined, 'a leader');
      const first = leaderOf()!;
      const second = candidates.find((c) => c !== first)!;
      await waitFor(() => second.elector.leader === first.identity, 'the other to see the leader');
      const lease = () => sim.store.get('leases', 'kube-system', 'kops-controller-leader') as V1Lease;
      assert.equal(lease().spec?.holderIdentity, first.identity);
      assert.match(String(lease().spec?.renewTime), /\.\d{6}Z$/, 'MicroTime with 6 digits on the wire');

      first.network.down = true;
      await waitFor(() => second.elector.isLeader, 'the takeover');
      assert.equal(first.elector.isLeader, false);
      assert.equal(lease().spec?.holderIdentity, second.identity);
      assert.equal(lease().spec?.leaseTransitions, 1);

      first.network.down = false;
      await waitFor(() => first.elector.leader === second.identity, 'the old leader to see the new one');
      second.abort.abort();
      await second.done;
      assert.equal(lease().spec?.holderIdentity, '', 'released on shutdown');
      await waitFor(() => first.elector.isLeader, 'the takeover after the release');
      assert.equal(lease().spec?.leaseTransitions, 2);
      assert.equal(overlap, false, 'never two leaders at a sampled instant');
    } finally {
      clearInterval(sampler);
      for (const c of candidates) c.abort.abort();
      await Promise.all(candidates.map((c) => c.done));
      await sim.close();
    }
  });
});
