/**
 * The budget of cloud reads that unauthenticated id-only proofs may cause (refusal-budget.ts),
 * through the real `hetzner` policy and identifier against the Hetzner simulator: a flood of made-up
 * ids from anywhere used to cost one project-quota read each (and three with the retries of a 429),
 * draining the quota the CCM, the autoscaler and kops share (tmp/redteam/04-hetzner-quota-drain.ts).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createHetznerProvider, type HetznerProvider } from '../cloud/hetzner/provider.ts';
import { useSimulatedCloud } from '../cloud/simulated-cloud.test-support.ts';
import type { KopsError } from '../errors.ts';
import { type HetznerSimulator, startHetznerSimulator } from '../sim/hetzner/simulator.ts';
import { contextAt, testRequest } from '../testing/bootstrap-request.ts';
import { dependencyOf, isDependencyFault } from './dependency.ts';
import { cloudIdProof } from './policies/cloud-id.test-support.ts';
import { hetznerPolicy } from './policies/hetzner.ts';
import { RefusalBudget, refusedIdTtlMs } from './refusal-budget.ts';
import type { BootstrapPolicy, PolicyDecision } from './types.ts';

const cluster = 'budget.example.com';
let sim: HetznerSimulator;
let provider: HetznerProvider;

useSimulatedCloud(startHetznerSimulator, (started) => {
  sim = started;
  provider = createHetznerProvider({
    clusterName: cluster,
    endpoint: started.endpoint,
    token: started.token,
    api: { retries: 0 },
  });
  return provider;
});

/** A policy with its own budget of `burst` refusals, refilled one a minute, on a clock the test moves. */
function policyWith(burst: number) {
  const clock = { ms: 0 };
  const budget = new RefusalBudget({ limit: { burst, perSecond: 1 / 60 }, now: () => clock.ms });
  const policy = hetznerPolicy({ identifier: provider.nodeIdentifier, refusalBudget: budget });
  return { clock, policy };
}

const evaluate = (policy: BootstrapPolicy, id: number | string) =>
  policy.evaluate(testRequest({ proof: cloudIdProof('x-hetzner-id', String(id)) }), contextAt());

/** `deny`, `fault:<retry-after>` or `approve`. */
async function outcome(decision: Promise<PolicyDecision>): Promise<string> {
  try {
    return (await decision).verdict;
  } catch (err) {
    assert.ok(isDependencyFault(err), String(err));
    assert.equal(dependencyOf(err), 'policy:hetzner');
    return `fault:${(err as KopsError).retryAfterSeconds}`;
  }
}

test('a flood of made-up server ids costs the cloud at most the refusal budget; the rest are 503 with Retry-After before any call', async () => {
  const { policy } = policyWith(5);
  const outcomes: string[] = [];
  for (let i = 0; i < 40; i++) outcomes.push(await outcome(evaluate(policy, 700_000 + i)));
  assert.deepEqual(outcomes.slice(0, 5), Array(5).fill('deny'));
  assert.ok(
    outcomes.slice(5).every((o) => /^fault:\d+$/.test(o) && Number(o.slice(6)) >= 1),
    outcomes.join(' '),
  );
  assert.equal(sim.count('servers.get'), 5, 'one read per refusal the budget allowed, none after');
});

test('a refused id is answered from memory for a minute (a misconfigured machine retrying costs one read a minute); then it is read again', async () => {
  const { clock, policy } = policyWith(30);
  const stranger = sim.addServer({ labels: { 'kops.k8s.io/cluster': 'other.example.com' } });
  for (let i = 0; i < 10; i++) {
    const decision = await evaluate(policy, stranger.id);
    assert.equal(decision.verdict, 'deny');
    assert.match(decision.reasons.join(' '), /other\.example\.com/);
  }
  assert.equal(sim.count('servers.get'), 1);
  // The server joins our cluster: within the minute the refusal stands, after it the record decides.
  stranger.labels = { 'kops.k8s.io/cluster': cluster, 'kops.k8s.io/instance-group': 'nodes' };
  assert.equal((await evaluate(policy, stranger.id)).verdict, 'deny');
  clock.ms += refusedIdTtlMs + 1;
  assert.equal((await evaluate(policy, stranger.id)).verdict, 'approve');
  assert.equal(sim.count('servers.get'), 2);
});

test('joins of live servers of ours cost no budget; once refusals used it up they wait (503), and join when it refills', async () => {
  const { clock, policy } = policyWith(2);
  const ours = Array.from({ length: 10 }, () =>
    sim.addServer({ labels: { 'kops.k8s.io/cluster': cluster, 'kops.k8s.io/instance-group': 'nodes' } }),
  );
  for (const server of ours) assert.equal((await evaluate(policy, server.id)).verdict, 'approve');
  assert.equal(await outcome(evaluate(policy, 710_001)), 'deny');
  assert.equal(await outcome(evaluate(policy, 710_002)), 'deny');
  const before = sim.count('servers.get');
  assert.match(await outcome(evaluate(policy, ours[0]?.id as number)), /^fault:/);
  assert.equal(sim.count('servers.get'), before, 'no cloud call while the budget is empty');
  clock.ms += 60_000;
  assert.equal((await evaluate(policy, ours[0]?.id as number)).verdict, 'approve');
});

test('the cloud failing is a fault, not a refusal: it takes nothing from the budget and is not remembered', async () => {
  const { policy } = policyWith(1);
  const [server] = Array.from({ length: 1 }, () =>
    sim.addServer({ labels: { 'kops.k8s.io/cluster': cluster, 'kops.k8s.io/instance-group': 'nodes' } }),
  );
  assert.ok(server);
  for (let i = 0; i < 5; i++) {
    sim.fault({ times: 1, status: 503, operation: 'servers.get' });
    assert.match(await outcome(evaluate(policy, server.id)), /^fault:/);
  }
  assert.equal((await evaluate(policy, server.id)).verdict, 'approve');
  assert.equal(await outcome(evaluate(policy, 720_001)), 'deny', 'the one refusal is still in the budget');
});
