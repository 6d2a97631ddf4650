import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import {
  ConfigError,
  ForbiddenError,
  InvalidInputError,
  NotFoundError,
  RateLimitedError,
} from '../../errors.ts';
import { awsProviderID, clusterInstances, simInstanceId } from '../../sim/aws/scenario.ts';
import { type AwsSimulator, startAwsSimulator } from '../../sim/aws/server.ts';
import { capturedLogger } from '../../testing/log-capture.ts';
import type { IdentifyResult, NodeIdentity } from '../types.ts';
import { type AwsClients, createAwsClients } from './clients.ts';
import { AwsNodeIdentifier } from './identify.ts';

const cluster = 'prod.example.com';

function identityOf(result: IdentifyResult | undefined): NodeIdentity {
  assert.ok(
    result?.ok,
    `expected an identity, got ${result && !result.ok ? result.error.message : 'nothing'}`,
  );
  return result.identity;
}

function errorOf(result: IdentifyResult | undefined): Error {
  assert.ok(result && !result.ok, 'expected the identification to fail');
  return result.error;
}

function reasonOf(result: IdentifyResult | undefined): unknown {
  const error = errorOf(result);
  assert.ok(error instanceof ForbiddenError, `expected ForbiddenError, got ${error.name}: ${error.message}`);
  return error.details?.['reason'];
}

describe('AwsNodeIdentifier', () => {
  let sim: AwsSimulator;
  let clients: AwsClients;
  let identifier: AwsNodeIdentifier;

  before(async () => {
    sim = await startAwsSimulator({ throttling: true });
    sim.ec2.addInstances([
      ...clusterInstances({
        cluster,
        instanceGroup: 'nodes-us-east-1a',
        count: 5_000,
        zones: ['us-east-1a'],
      }),
      {
        id: 'i-0c0000000000000c1',
        zone: 'us-east-1a',
        cluster,
        instanceGroup: 'control-plane-us-east-1a',
        publicIp: '198.51.100.4',
        publicDnsName: 'ec2-198-51-100-4.compute-1.amazonaws.com',
        ipv6: '2600:1f18::4',
      },
      {
        id: 'i-0c0000000000000c2',
        zone: 'us-east-1b',
        cluster,
        instanceGroup: 'spot-nodes',
        lifecycle: 'spot',
      },
      { id: 'i-0c0000000000000c3', zone: 'us-east-1a', cluster: 'other.example.com', instanceGroup: 'nodes' },
      { id: 'i-0c0000000000000c4', zone: 'us-east-1a', instanceGroup: 'nodes' },
      { id: 'i-0c0000000000000c5', zone: 'us-east-1a', cluster, instanceGroup: 'nodes', state: 'stopped' },
      { id: 'i-0c0000000000000c6', zone: 'us-east-1a', cluster, instanceGroup: 'nodes', state: 'terminated' },
      { id: 'i-0c0000000000000c7', zone: 'us-east-1a', cluster },
      {
        id: 'i-0c0000000000000c8',
        zone: 'us-east-1a',
        instanceGroup: 'nodes',
        tags: { [`kubernetes.io/cluster/${cluster}`]: 'shared' },
      },
      {
        id: 'i-0c0000000000000c9',
        zone: 'us-east-1a',
        instanceGroup: 'nodes',
        tags: { KubernetesCluster: cluster },
      },
      {
        id: 'i-0c000000000000010',
        zone: 'us-east-1a',
        instanceGroup: 'nodes',
        tags: { KubernetesCluster: 'other.example.com', [`kubernetes.io/cluster/${cluster}`]: 'owned' },
      },
      { id: 'i-0c000000000000011', zone: 'us-east-1a', cluster, instanceGroup: 'nodes', state: 'pending' },
    ]);
    clients = await createAwsClients({
      region: sim.region,
      endpoint: sim.endpoint,
      credentials: sim.credentials,
    });
  });
  beforeEach(() => {
    identifier = new AwsNodeIdentifier({ ec2: clients.ec2, clusterName: cluster });
    sim.calls.reset();
  });
  after(async () => {
    clients.destroy();
    await sim.close();
  });

  it('resolves a node to its instance group, zone, state and addresses from EC2', async () => {
    const providerID = 'aws:///us-east-1a/i-0c0000000000000c1';
    const identity = identityOf((await identifier.identify([providerID])).get(providerID));
    assert.equal(identity.providerID, providerID);
    assert.equal(identity.instanceId, 'i-0c0000000000000c1');
    assert.equal(identity.instanceGroup, 'control-plane-us-east-1a');
    assert.equal(identity.state, 'running');
    assert.equal(identity.zone, 'us-east-1a');
    assert.deepEqual(
      identity.addresses.map((a) => a.type),
      ['InternalIP', 'InternalIP', 'InternalDNS', 'ExternalIP', 'ExternalDNS'],
    );
    assert.ok(identity.addresses.some((a) => a.address === '198.51.100.4'));
    assert.ok(identity.addresses.some((a) => a.address === '2600:1f18::4'));
    assert.equal(identity.cloudLabels, undefined);
  });

  it('names the incarnation from EC2: the instance id and its LaunchTime, which a stop and start moves', async () => {
    const id = 'i-0c000000000000012';
    const providerID = `aws:///us-east-1a/${id}`;
    const launched = new Date('2026-03-04T05:06:07.000Z');
    sim.ec2.addInstances([{ id, zone: 'us-east-1a', cluster, instanceGroup: 'nodes', launchTime: launched }]);
    const first = identityOf((await identifier.identify([providerID])).get(providerID));
    assert.deepEqual(first.incarnation, { id, createdAt: launched });
    sim.ec2.setInstanceState(id, 'stopped');
    const started = new Date('2026-03-05T00:00:00.000Z');
    sim.ec2.startInstance(id, started);
    const again = identityOf((await identifier.identify([providerID], { maxAgeMs: 0 })).get(providerID));
    assert.deepEqual(again.incarnation, { id, createdAt: started });
  });

  it('labels spot instances as spot workers', async () => {
    const providerID = 'aws:///us-east-1b/i-0c0000000000000c2';
    const identity = identityOf((await identifier.identify([providerID])).get(providerID));
    assert.deepEqual(identity.cloudLabels, { 'node-role.kubernetes.io/spot-worker': 'true' });
  });

  it('accepts pending instances and the shared and legacy ownership tags', async () => {
    const ids = ['i-0c0000000000000c8', 'i-0c0000000000000c9', 'i-0c000000000000011'].map(
      (id) => `aws:///us-east-1a/${id}`,
    );
    const results = await identifier.identify(ids);
    for (const id of ids) assert.equal(identityOf(results.get(id)).instanceGroup, 'nodes');
    assert.equal(identityOf(results.get(ids[2] as string)).state, 'pending');
  });

  describe('spoofing attempts', () => {
    it("refuses a providerID naming another cluster's instance", async () => {
      const providerID = 'aws:///us-east-1a/i-0c0000000000000c3';
      const result = (await identifier.identify([providerID])).get(providerID);
      assert.equal(reasonOf(result), 'foreign-cluster');
      assert.match(errorOf(result).message, /tagged for cluster other\.example\.com/);
    });

    it('refuses an instance with no cluster ownership tag, or one claiming two clusters', async () => {
      const untagged = 'aws:///us-east-1a/i-0c0000000000000c4';
      const conflicting = 'aws:///us-east-1a/i-0c000000000000010';
      const results = await identifier.identify([untagged, conflicting]);
      assert.equal(reasonOf(results.get(untagged)), 'foreign-cluster');
      assert.equal(reasonOf(results.get(conflicting)), 'foreign-cluster');
    });

    it('refuses stopped and terminated instances', async () => {
      const stopped = 'aws:///us-east-1a/i-0c0000000000000c5';
      const terminated = 'aws:///us-east-1a/i-0c0000000000000c6';
      const results = await identifier.identify([stopped, terminated]);
      assert.equal(reasonOf(results.get(stopped)), 'not-running');
      assert.match(errorOf(results.get(terminated)).message, /is terminated, not pending or running/);
    });

    it("refuses a providerID whose zone is not the instance's", async () => {
      const providerID = 'aws:///us-east-1c/i-0c0000000000000c1';
      assert.equal(reasonOf((await identifier.identify([providerID])).get(providerID)), 'zone-mismatch');
    });

    it('refuses a malformed providerID without calling EC2', async () => {
      const bad = [
        'aws://us-east-1a/i-0c0000000000000c1',
        'i-0c0000000000000c1',
        'aws:///us-east-1a/i-nothex',
      ];
      const results = await identifier.identify(bad);
      for (const providerID of bad) assert.ok(errorOf(results.get(providerID)) instanceof InvalidInputError);
      assert.equal(sim.calls.count(), 0);
    });

    it('refuses an instance without the instance group tag', async () => {
      const providerID = 'aws:///us-east-1a/i-0c0000000000000c7';
      assert.equal(reasonOf((await identifier.identify([providerID])).get(providerID)), 'no-instance-group');
    });
  });

  it('isolates a missing instance in a batch: NotFound for it only', async () => {
    const good = [1, 2, 3].map((n) => awsProviderID({ id: simInstanceId(n), zone: 'us-east-1a' }));
    const ghost = 'aws:///us-east-1a/i-0dddddddddddddddd';
    const results = await identifier.identify([...good, ghost]);
    for (const providerID of good)
      assert.equal(identityOf(results.get(providerID)).instanceGroup, 'nodes-us-east-1a');
    const error = errorOf(results.get(ghost));
    assert.ok(error instanceof NotFoundError);
    assert.match(error.message, /i-0dddddddddddddddd/);
    assert.equal(sim.calls.count('DescribeInstances'), 2, 'the failed call, then the rest once');
  });

  it('resolves 5,000 nodes with the EC2 throttle on in a handful of calls', async () => {
    const providerIDs = Array.from({ length: 5_000 }, (_, i) =>
      awsProviderID({ id: simInstanceId(i + 1), zone: 'us-east-1a' }),
    );
    const results = await identifier.identify(providerIDs);
    assert.equal(results.size, 5_000);
    for (const providerID of providerIDs)
      assert.equal(identityOf(results.get(providerID)).instanceGroup, 'nodes-us-east-1a');
    assert.equal(sim.calls.count('DescribeInstances'), 5);
    assert.equal(sim.calls.throttled(), 0);
  });

  it('coalesces concurrent single-node identify() calls into shared calls', async () => {
    const providerIDs = Array.from({ length: 1_500 }, (_, i) =>
      awsProviderID({ id: simInstanceId(i + 1), zone: 'us-east-1a' }),
    );
    const results = await Promise.all(providerIDs.map((p) => identifier.identify([p])));
    for (const [i, result] of results.entries()) identityOf(result.get(providerIDs[i] as string));
    assert.equal(sim.calls.count('DescribeInstances'), 2, '1,500 ids in calls of at most 1,000');
  });

  it('lookupInstance (bootstrap): concurrent lookups share DescribeInstances calls, and each reads EC2 now, never the cache', async () => {
    const ids = Array.from({ length: 300 }, (_, i) => simInstanceId(i + 1));
    const identities = await Promise.all(ids.map((id) => identifier.lookupInstance(id)));
    assert.deepEqual(
      identities.map((identity) => identity.instanceId),
      ids,
    );
    assert.equal(sim.calls.count('DescribeInstances'), 1, '300 concurrent joins, one call');
    // The identities are now cached for labelling; a bootstrap lookup still asks EC2, and sees a stop.
    const id = ids[0] as string;
    sim.ec2.setInstanceState(id, 'stopped');
    try {
      await assert.rejects(identifier.lookupInstance(id), (err: unknown) => {
        assert.ok(err instanceof ForbiddenError, String(err));
        assert.equal(err.details?.['reason'], 'not-running');
        return true;
      });
      assert.equal(sim.calls.count('DescribeInstances'), 2, 'read from EC2, not from the cache');
      // The refusal also dropped the cached identity, so labelling asks EC2 again too.
      const providerID = awsProviderID({ id, zone: 'us-east-1a' });
      assert.equal(reasonOf((await identifier.identify([providerID])).get(providerID)), 'not-running');
      assert.equal(sim.calls.count('DescribeInstances'), 3);
    } finally {
      sim.ec2.setInstanceState(id, 'running');
    }
    // Batched lookups of which one is refused: the others are answered, the refused one fails alone.
    sim.ec2.setInstanceState(id, 'terminated');
    try {
      const outcomes = await Promise.allSettled(ids.slice(0, 50).map((i) => identifier.lookupInstance(i)));
      assert.equal(outcomes[0]?.status, 'rejected');
      assert.ok(outcomes.slice(1).every((o) => o.status === 'fulfilled'));
      assert.equal(sim.calls.count('DescribeInstances'), 4, '50 lookups, one call');
    } finally {
      sim.ec2.setInstanceState(id, 'running');
    }
  });

  it('lookupInstance in a join storm: lookups that trickle in share calls within the call budget', async () => {
    // Joins reach the lookup one by one as the server gets to each: 400 over ~0.8 s. With only a
    // window, each 20 ms would make its own call (about 40); the budget holds them to its bound.
    const budget = { burst: 2, perSecond: 4 };
    const storm = new AwsNodeIdentifier({ ec2: clients.ec2, clusterName: cluster, callBudget: budget });
    const started = performance.now();
    const lookups: Promise<unknown>[] = [];
    for (let i = 1; i <= 400; i++) {
      lookups.push(storm.lookupInstance(simInstanceId(i)));
      if (i % 10 === 0) await new Promise((resolve) => setTimeout(resolve, 20));
    }
    const identities = (await Promise.all(lookups)) as { instanceId: string }[];
    const seconds = (performance.now() - started) / 1000;
    assert.deepEqual(
      identities.map((identity) => identity.instanceId),
      Array.from({ length: 400 }, (_, i) => simInstanceId(i + 1)),
    );
    const calls = sim.calls.count('DescribeInstances');
    assert.ok(
      calls <= budget.burst + Math.ceil(budget.perSecond * seconds) + 1,
      `${calls} DescribeInstances calls in ${seconds.toFixed(2)} s`,
    );
    assert.equal(sim.calls.throttled('DescribeInstances'), 0);
  });

  it('answers from the cache without calling EC2 again', async () => {
    const providerIDs = Array.from({ length: 300 }, (_, i) =>
      awsProviderID({ id: simInstanceId(i + 1), zone: 'us-east-1a' }),
    );
    await identifier.identify(providerIDs);
    assert.equal(sim.calls.count('DescribeInstances'), 1);
    const again = await identifier.identify(providerIDs);
    assert.equal(again.size, 300);
    assert.equal(sim.calls.count('DescribeInstances'), 1, 'cache hits make no calls');
    // A cached identity is still checked against the zone the providerID names.
    const wrongZone = `aws:///us-east-1b/${simInstanceId(1)}`;
    assert.equal(reasonOf((await identifier.identify([wrongZone])).get(wrongZone)), 'zone-mismatch');
    assert.equal(sim.calls.count('DescribeInstances'), 1);
  });

  it('asks EC2 again once an identity expires or is forgotten, and drops a terminated instance', async () => {
    let now = 0;
    const expiring = new AwsNodeIdentifier({
      ec2: clients.ec2,
      clusterName: cluster,
      cacheTtlMs: 1000,
      now: () => now,
    });
    const id = 'i-0c000000000000011';
    const providerID = `aws:///us-east-1a/${id}`;
    identityOf((await expiring.identify([providerID])).get(providerID));
    expiring.forget(id);
    identityOf((await expiring.identify([providerID])).get(providerID));
    assert.equal(sim.calls.count('DescribeInstances'), 2);
    sim.ec2.setInstanceState(id, 'terminated');
    try {
      now = 1000;
      assert.equal(reasonOf((await expiring.identify([providerID])).get(providerID)), 'not-running');
      assert.equal(reasonOf((await expiring.identify([providerID])).get(providerID)), 'not-running');
      assert.equal(sim.calls.count('DescribeInstances'), 4, 'a refused identity is never cached');
    } finally {
      sim.ec2.setInstanceState(id, 'pending');
    }
  });

  it('a clock stepped back after running ahead: maxAgeMs 0 still reads EC2, so a terminated instance is not vouched for from the cache', async () => {
    let now = 3_600_000; // an hour ahead when the node controller cached the identity
    const identifier = new AwsNodeIdentifier({ ec2: clients.ec2, clusterName: cluster, now: () => now });
    const id = 'i-0c000000000000011';
    const providerID = `aws:///us-east-1a/${id}`;
    identityOf((await identifier.identify([providerID])).get(providerID));
    sim.ec2.setInstanceState(id, 'terminated');
    try {
      now = 1_000; // corrected, a second later
      assert.equal(
        reasonOf((await identifier.identify([providerID], { maxAgeMs: 0 })).get(providerID)),
        'not-running',
      );
      assert.equal(sim.calls.count('DescribeInstances'), 2);
    } finally {
      sim.ec2.setInstanceState(id, 'pending');
    }
  });

  it('with maxAgeMs, reads a state older than the bound again, while callers without one keep the cache', async () => {
    let now = 0;
    const bounded = new AwsNodeIdentifier({ ec2: clients.ec2, clusterName: cluster, now: () => now });
    const id = 'i-0c000000000000011';
    const providerID = `aws:///us-east-1a/${id}`;
    identityOf((await bounded.identify([providerID], { maxAgeMs: 60_000 })).get(providerID));
    sim.ec2.setInstanceState(id, 'terminated');
    try {
      now = 59_999;
      identityOf((await bounded.identify([providerID], { maxAgeMs: 60_000 })).get(providerID));
      assert.equal(sim.calls.count('DescribeInstances'), 1, 'an answer younger than the bound serves');
      now = 60_000;
      // The NodeController (no bound) still gets the cached identity: labels need no fresh state.
      identityOf((await bounded.identify([providerID])).get(providerID));
      assert.equal(sim.calls.count('DescribeInstances'), 1);
      assert.equal(
        reasonOf((await bounded.identify([providerID], { maxAgeMs: 60_000 })).get(providerID)),
        'not-running',
      );
      assert.equal(sim.calls.count('DescribeInstances'), 2, 'an answer as old as the bound is read again');
      // The terminated state it found replaced the cached identity for every caller.
      assert.equal(reasonOf((await bounded.identify([providerID])).get(providerID)), 'not-running');
    } finally {
      sim.ec2.setInstanceState(id, 'pending');
    }
  });

  it('reports a throttled or refused EC2 as a retryable or configuration error for the whole batch', async () => {
    const frozen = new Date();
    const drained = await startAwsSimulator({ now: () => frozen });
    drained.ec2.addInstances(clusterInstances({ cluster, instanceGroup: 'nodes', count: 2 }));
    while (drained.throttling.bucket.take()) {
      // empty the bucket; the frozen clock never refills it
    }
    const limited = await createAwsClients({
      region: drained.region,
      endpoint: drained.endpoint,
      credentials: drained.credentials,
      maxAttempts: 2,
    });
    const denied = await createAwsClients({
      region: drained.region,
      endpoint: drained.endpoint,
      credentials: { ...drained.credentials, secretAccessKey: 'wrong' },
      maxAttempts: 1,
    });
    try {
      const providerIDs = [1, 2].map((n) => awsProviderID({ id: simInstanceId(n), zone: 'us-east-1a' }));
      const throttled = await new AwsNodeIdentifier({ ec2: limited.ec2, clusterName: cluster }).identify(
        providerIDs,
      );
      for (const p of providerIDs) assert.ok(errorOf(throttled.get(p)) instanceof RateLimitedError);
      const refused = await new AwsNodeIdentifier({ ec2: denied.ec2, clusterName: cluster }).identify(
        providerIDs,
      );
      for (const p of providerIDs) assert.ok(errorOf(refused.get(p)) instanceof ConfigError);
    } finally {
      limited.destroy();
      denied.destroy();
      await drained.close();
    }
  });
});

describe('AwsNodeIdentifier during an EC2 outage', () => {
  it('logs DescribeInstances failing once per cause, not per failed call', async () => {
    const denied = await startAwsSimulator();
    denied.ec2.addInstances(clusterInstances({ cluster, instanceGroup: 'nodes', count: 2 }));
    const refused = await createAwsClients({
      region: denied.region,
      endpoint: denied.endpoint,
      credentials: { ...denied.credentials, secretAccessKey: 'wrong' },
      maxAttempts: 1,
    });
    const { logger, lines } = capturedLogger();
    try {
      const ids = [1, 2].map((n) => awsProviderID({ id: simInstanceId(n), zone: 'us-east-1a' }));
      const failing = new AwsNodeIdentifier({ ec2: refused.ec2, clusterName: cluster, logger });
      // Five lookups, within the identifier's burst of calls: each is one failed DescribeInstances.
      for (let i = 0; i < 5; i++) {
        const result = (await failing.identify([ids[i % 2] as string], { maxAgeMs: 0 })).get(
          ids[i % 2] as string,
        );
        assert.ok(result && !result.ok);
      }
      const warned = lines.filter(
        (l) => l.includes('DescribeInstances failed') && l.includes('"level":"warn"'),
      );
      assert.equal(warned.length, 1, lines.join(''));
    } finally {
      refused.destroy();
      await denied.close();
    }
  });
});

describe('AwsNodeIdentifier batch isolation', () => {
  it('halves a batch until the bad id is isolated when EC2 does not name it', async () => {
    const bad = 'i-0eeeeeeeeeeeeeeee';
    const calls: number[] = [];
    const ec2 = {
      async send(command: { input: { InstanceIds: string[] } }) {
        const ids = command.input.InstanceIds;
        calls.push(ids.length);
        if (ids.includes(bad))
          throw Object.assign(new Error('The instance ID does not exist'), {
            name: 'InvalidInstanceID.NotFound',
          });
        return {
          Reservations: [
            {
              Instances: ids.map((id) => ({
                InstanceId: id,
                State: { Name: 'running' },
                Placement: { AvailabilityZone: 'us-east-1a' },
                Tags: [
                  { Key: 'KubernetesCluster', Value: cluster },
                  { Key: 'kops.k8s.io/instancegroup', Value: 'nodes' },
                ],
              })),
            },
          ],
        };
      },
    };
    const identifier = new AwsNodeIdentifier({ ec2: ec2 as never, clusterName: cluster });
    const ids = [...Array.from({ length: 7 }, (_, i) => simInstanceId(i + 1)), bad];
    const results = await identifier.identify(ids.map((id) => `aws:///us-east-1a/${id}`));
    assert.ok(errorOf(results.get(`aws:///us-east-1a/${bad}`)) instanceof NotFoundError);
    for (const id of ids.slice(0, 7))
      assert.equal(identityOf(results.get(`aws:///us-east-1a/${id}`)).instanceGroup, 'nodes');
    assert.deepEqual(calls, [8, 4, 4, 2, 2, 1, 1], 'log2(n) extra calls, never one per id');
  });
});
