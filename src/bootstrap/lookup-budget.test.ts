/**
 * What unauthenticated id-only proofs may cost the cloud (lookup-budget.ts), through the real
 * `hetzner` policy and identifier against the Hetzner simulator. Before, every proof cost a fresh
 * read from the project's quota, which the CCM, the autoscaler and kops share, and one address at the
 * default per-source rate drained it (tmp/redteam/04-hetzner-quota-drain.ts). A first fix, a
 * refusal budget that answered 503 once spent, let anyone hold back every join with three made-up
 * ids a minute, and still let crowds, throttled answers and live ids through uncounted
 * (tmp/review-s14.md findings 1, 2, 6).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ClusterServerIdentifier } from '../cloud/cluster-servers.ts';
import { createHetznerProvider, type HetznerProvider } from '../cloud/hetzner/provider.ts';
import { hetznerProviderIds } from '../cloud/hetzner/servers.ts';
import { useSimulatedCloud } from '../cloud/simulated-cloud.test-support.ts';
import type { KopsError } from '../errors.ts';
import { silentLogger } from '../log.ts';
import { type HetznerSimulator, startHetznerSimulator } from '../sim/hetzner/simulator.ts';
import { contextAt, testRequest } from '../testing/bootstrap-request.ts';
import { DependencyOutages, dependencyOf, isDependencyFault } from './dependency.ts';
import { LookupBudget, rememberedRefusalTtlMs } from './lookup-budget.ts';
import { cloudIdProof } from './policies/cloud-id.test-support.ts';
import { hetznerPolicy } from './policies/hetzner.ts';
import type { BootstrapPolicy, PolicyDecision } from './types.ts';

const cluster = 'budget.example.com';
let sim: HetznerSimulator;

useSimulatedCloud(startHetznerSimulator, (started) => {
  sim = started;
  // Each test gets its own provider (below): the paced list is the identifier's.
  return { close: () => undefined };
});

/**
 * A policy with a budget of `burst` reads, refilled one a minute, over an identifier whose list
 * pacing reads the same clock, which the test moves.
 */
function policyWith(burst: number): {
  clock: { ms: number };
  policy: BootstrapPolicy;
  provider: HetznerProvider;
} {
  const clock = { ms: 0 };
  const now = () => clock.ms;
  const provider = createHetznerProvider({
    clusterName: cluster,
    endpoint: sim.endpoint,
    token: sim.token,
    api: { retries: 0 },
  });
  const identifier = new ClusterServerIdentifier({
    directory: provider.servers,
    providerIds: hetznerProviderIds,
    clusterName: cluster,
    noun: 'Hetzner server',
    clusterMark: `label kops.k8s.io/cluster=${cluster}`,
    groupMark: 'label kops.k8s.io/instance-group',
    now,
  });
  const lookupBudget = new LookupBudget({ limit: { burst, perSecond: 1 / 60 }, now });
  return { clock, provider, policy: hetznerPolicy({ identifier, lookupBudget }) };
}

const evaluate = (policy: BootstrapPolicy, id: number | string) =>
  policy.evaluate(testRequest({ proof: cloudIdProof('x-hetzner-id', String(id)) }), contextAt());

/** `approve`, `deny`, or `fault:<reason>` (a 503: a dependency fault of the policy). */
async function outcome(decision: Promise<PolicyDecision>): Promise<string> {
  try {
    return (await decision).verdict;
  } catch (err) {
    assert.ok(isDependencyFault(err), String(err));
    assert.equal(dependencyOf(err), 'policy:hetzner');
    return `fault:${((err as KopsError).cause as KopsError | undefined)?.reasonCode ?? (err as KopsError).reasonCode}`;
  }
}

const reads = () => sim.count('servers.get');
const lists = () => sim.count('servers.list');

function ourServer(status = 'running') {
  return sim.addServer({
    status,
    labels: { 'kops.k8s.io/cluster': cluster, 'kops.k8s.io/instance-group': 'nodes' },
  });
}

test('a flood of made-up ids costs the cloud the budget and one paced list, whatever its size; past the budget they are 503 (not in the list)', async () => {
  const { provider, policy } = policyWith(5);
  try {
    const outcomes: string[] = [];
    for (let i = 0; i < 60; i++) outcomes.push(await outcome(evaluate(policy, 700_000 + i)));
    assert.deepEqual(outcomes.slice(0, 5), Array(5).fill('deny'));
    assert.deepEqual([...new Set(outcomes.slice(5))], ['fault:unlisted']);
    assert.deepEqual([reads(), lists()], [5, 1]);
  } finally {
    provider.close();
  }
});

test('spending the budget holds back no join: a live server of ours is found in the paced list, with no read by id', async () => {
  const { clock, provider, policy } = policyWith(3);
  try {
    for (let i = 0; i < 3; i++) await outcome(evaluate(policy, 710_000 + i));
    // The attacker spends each token as it comes back; the node asks right after, every time.
    const attempts: string[] = [];
    for (let minute = 1; minute <= 10; minute++) {
      clock.ms = minute * 60_000;
      await outcome(evaluate(policy, 710_100 + minute));
      const ours = ourServer();
      clock.ms += 20_000; // past the list interval: the next list holds the new server
      attempts.push(await outcome(evaluate(policy, ours.id)));
    }
    assert.deepEqual(attempts, Array(10).fill('approve'));
  } finally {
    provider.close();
  }
});

test('a crowd of made-up ids at once reads by id only what the budget allows', async () => {
  const { provider, policy } = policyWith(2);
  try {
    const outcomes = await Promise.all(
      Array.from({ length: 40 }, (_, i) => outcome(evaluate(policy, 720_000 + i))),
    );
    assert.ok(reads() <= 2, `${reads()} reads by id`);
    assert.ok(lists() <= 2, `${lists()} lists`);
    assert.ok(
      outcomes.every((o) => o === 'deny' || o === 'fault:unlisted'),
      outcomes.join(' '),
    );
  } finally {
    provider.close();
  }
});

test('a throttled cloud (429) is asked no more than the budget and one list an interval', async () => {
  const { clock, provider, policy } = policyWith(3);
  try {
    sim.fault({ times: 1_000, status: 429 });
    for (let i = 0; i < 30; i++) assert.match(await outcome(evaluate(policy, 730_000 + i)), /^fault:/);
    assert.deepEqual([reads(), lists()], [3, 1]);
    clock.ms += 16_000;
    await outcome(evaluate(policy, 730_100));
    assert.equal(lists(), 2, 'the failed list is tried again after the interval, not per request');
  } finally {
    sim.clearFaults();
    provider.close();
  }
});

test('one live id asked over and over costs the budget, then the paced list: every request is still approved', async () => {
  const { provider, policy } = policyWith(5);
  try {
    const ours = ourServer();
    for (let i = 0; i < 50; i++) assert.equal(await outcome(evaluate(policy, ours.id)), 'approve');
    assert.deepEqual([reads(), lists()], [5, 1]);
  } finally {
    provider.close();
  }
});

test("another cluster's server is answered from memory for a minute; a server not running yet is read again (a stranger's request cannot plant its refusal)", async () => {
  const { clock, provider, policy } = policyWith(30);
  try {
    const theirs = sim.addServer({ labels: { 'kops.k8s.io/cluster': 'other.example.com' } });
    for (let i = 0; i < 10; i++) assert.equal(await outcome(evaluate(policy, theirs.id)), 'deny');
    assert.equal(reads(), 1);
    clock.ms += rememberedRefusalTtlMs + 1;
    assert.equal(await outcome(evaluate(policy, theirs.id)), 'deny');
    assert.equal(reads(), 2);

    const booting = ourServer('initializing');
    assert.equal(await outcome(evaluate(policy, booting.id)), 'deny');
    booting.status = 'running';
    assert.equal(await outcome(evaluate(policy, booting.id)), 'approve');
  } finally {
    provider.close();
  }
});

test('the cloud failing is a fault, never a refusal, and not remembered', async () => {
  const { provider, policy } = policyWith(30);
  try {
    const ours = ourServer();
    sim.fault({ times: 1, status: 503, operation: 'servers.get' });
    assert.match(await outcome(evaluate(policy, ours.id)), /^fault:/);
    assert.equal(await outcome(evaluate(policy, ours.id)), 'approve');
  } finally {
    provider.close();
  }
});

test('attack: made-up ids past the budget, one every 2 s for 4 minutes, neither begin nor lengthen an outage: each fault waits for the next list, never 30–60 s', async () => {
  const { clock, provider, policy } = policyWith(0);
  const outages = new DependencyOutages({ logger: silentLogger, now: () => clock.ms, randomInt: () => 0 });
  try {
    const told: number[] = [];
    for (let t = 0; t <= 240_000; t += 2_000) {
      clock.ms = t;
      const fault = await evaluate(policy, 800_000 + t).catch((err: unknown) => err);
      assert.ok(isDependencyFault(fault), String(fault));
      told.push(outages.failed(fault).retryAfterSeconds);
    }
    // The list is 15 s old at most: the wait is what is left of it, whatever the outage tracker saw.
    assert.ok(Math.max(...told) <= 15, JSON.stringify(told));
    assert.ok(Math.min(...told) >= 1);
  } finally {
    provider.close();
  }
});
