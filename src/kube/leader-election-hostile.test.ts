/**
 * Leader election against an API server whose Lease answers are wrong (bad durations, counts and
 * times, a resourceVersion missing or frozen, failing reads), over real HTTP on loopback
 * (src/testing/hostile-apiserver.ts) with client-node's CoordinationV1Api, as `run` uses it. What must
 * hold: never two leaders because of a malformed Lease, no malformed value written back, and a state
 * (readiness) that says the lease was read only once it was.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { CoordinationV1Api, type V1Lease } from '@kubernetes/client-node';
import { answer, eventually, type HostileHandler, hostileApiServer } from '../testing/hostile-apiserver.ts';
import { LeaderElector } from './leader-election.ts';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A Lease `other` holds and renews: each read is a new renewal, unless `renewing` says otherwise. */
function heldLease(
  version: number,
  spec: Record<string, unknown> = {},
  metadata: Record<string, unknown> = {},
) {
  const now = new Date().toISOString();
  return {
    apiVersion: 'coordination.k8s.io/v1',
    kind: 'Lease',
    metadata: { name: 'l', namespace: 'kube-system', resourceVersion: String(version), ...metadata },
    spec: {
      holderIdentity: 'other',
      leaseDurationSeconds: 1,
      acquireTime: now,
      renewTime: now,
      leaseTransitions: 3,
      ...spec,
    },
  };
}

async function campaign(
  handler: HostileHandler,
  run: (ctx: { elector: LeaderElector; writes: V1Lease[]; led: () => number }) => Promise<void>,
): Promise<void> {
  const writes: V1Lease[] = [];
  const api = await hostileApiServer((req, res) => {
    if (req.method === 'PUT' || req.method === 'POST') {
      const body = JSON.parse(req.body) as V1Lease;
      writes.push(body);
      return answer(res, 200, { ...body, metadata: { ...body.metadata, resourceVersion: '9999' } });
    }
    return handler(req, res);
  });
  let led = 0;
  const elector = new LeaderElector({
    client: api.kubeConfig.makeApiClient(CoordinationV1Api),
    namespace: 'kube-system',
    name: 'l',
    identity: 'me',
    leaseDurationMs: 1500,
    renewDeadlineMs: 1000,
    retryPeriodMs: 100,
    onStartedLeading: () => {
      led++;
    },
  });
  const stop = new AbortController();
  const running = elector.run(stop.signal);
  try {
    await run({ elector, writes, led: () => led });
  } finally {
    stop.abort();
    await running;
    await api.close();
  }
}

describe('leader election against a hostile API server', () => {
  for (const duration of [-5, 'abc', { seconds: 15 }, 0.001, true, Number.MAX_VALUE * -1]) {
    test(`a live holder's lease with leaseDurationSeconds ${JSON.stringify(duration)} is not taken over`, async () => {
      let version = 0;
      await campaign(
        (_, res) => answer(res, 200, heldLease(++version, { leaseDurationSeconds: duration })),
        async ({ writes, led }) => {
          // Renewed at every read, so valid for the candidate's own leaseDuration (1.5 s) at least.
          await sleep(1_200);
          assert.equal(led(), 0, 'the candidate took a lease its holder renews');
          assert.deepEqual(writes, []);
        },
      );
    });
  }

  for (const [what, metadata] of [
    ['without a resourceVersion', { resourceVersion: undefined }],
    ['whose resourceVersion never changes', { resourceVersion: '7' }],
  ] as const) {
    test(`a lease ${what} is seen to change when its holder renews: no take-over while it renews, a take-over once it stops`, async () => {
      let renewing = true;
      const acquireTime = new Date().toISOString();
      let renewTime = acquireTime;
      await campaign(
        (_, res) => {
          if (renewing) renewTime = new Date().toISOString();
          const lease = heldLease(1, { acquireTime, renewTime }, metadata);
          answer(res, 200, lease);
        },
        async ({ writes, led }) => {
          await sleep(2_500);
          assert.equal(led(), 0, 'the candidate took a lease its holder renews');
          assert.deepEqual(writes, []);
          renewing = false;
          await eventually(() => led() === 1, 'the take-over once the holder stopped renewing', 5_000);
        },
      );
    });
  }

  test('a leaseTransitions that is not a count is written back as one, never as "x1"', async () => {
    await campaign(
      (_, res) => answer(res, 200, heldLease(1, { holderIdentity: '', leaseTransitions: 'x' })),
      async ({ writes }) => {
        await eventually(() => writes.length > 0, 'the take-over of the released lease');
        assert.equal(writes[0]?.spec?.leaseTransitions, 1);
      },
    );
  });

  test('a lease read that fails is not a lease read: the state stays unknown (not ready) until one succeeds', async () => {
    let failing = true;
    await campaign(
      (_, res) => {
        if (failing) return answer(res, 500, { kind: 'Status', code: 500, message: 'etcd is down' });
        answer(res, 200, heldLease(1, { leaseDurationSeconds: 60 }));
      },
      async ({ elector }) => {
        await sleep(1_200);
        assert.equal(elector.stateKnown, false, 'a failed read made the lease state known');
        failing = false;
        await eventually(() => elector.stateKnown, 'the state once a read succeeds');
        assert.equal(elector.leader, 'other');
        assert.equal(elector.isLeader, false);
      },
    );
  });

  test('timestamps that are not dates, a holder that is not a string, a spec that is null: no crash, no take-over of a held lease', async () => {
    let version = 0;
    await campaign(
      (_, res) =>
        answer(
          res,
          200,
          heldLease(++version, {
            renewTime: 'yesterday',
            acquireTime: 12,
            holderIdentity: 42,
          }),
        ),
      async ({ writes, led }) => {
        await sleep(1_200);
        assert.equal(led(), 0);
        assert.deepEqual(writes, []);
      },
    );
    await campaign(
      (_, res) => answer(res, 200, { ...heldLease(1), spec: null }),
      async ({ writes }) => {
        await eventually(() => writes.length > 0, 'a lease without a spec is taken as one without a holder');
        assert.equal(writes[0]?.spec?.holderIdentity, 'me');
        assert.equal(writes[0]?.spec?.leaseTransitions, 1);
      },
    );
  });
});
