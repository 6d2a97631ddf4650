import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  connections,
  formatIssuanceCost,
  type IssuanceCostOptions,
  msPerCertificate,
  policies,
  runIssuanceCost,
} from './issuance-cost.ts';

describe('bench/issuance-cost (smoke run)', () => {
  it('30 nodes, 2 rounds: every storm of each policy and connection certifies every node, the floor answers every request; the aws storms replay every proof', async () => {
    const options: IssuanceCostOptions = {
      nodes: 30,
      rounds: 2,
      concurrency: 16,
      warmUpStorms: 1,
      trees: [{ label: 'this tree', dir: new URL('..', import.meta.url).pathname }],
    };
    const samples = await runIssuanceCost(options);
    // Each round runs every connection kind for both servers and both floors, the second in the opposite order.
    const measured = [...policies, 'floor', 'floor'];
    assert.deepEqual(
      samples.map((s) => `${s.round}:${s.connection}:${s.policy}`),
      [1, 2].flatMap((round) =>
        connections.flatMap((connection) =>
          (round === 1 ? measured : [...measured].reverse()).map(
            (policy) => `${round}:${connection}:${policy}`,
          ),
        ),
      ),
    );
    for (const { figures, policy } of samples) {
      assert.equal(figures.firstFailure, undefined, `${figures.name}: ${figures.firstFailure}`);
      assert.equal(figures.verified, 30, figures.name);
      // The CPU clock ticks every 10 ms: 30 keep-alive requests to the bare floor may cost less than one.
      const least = policy === 'floor' ? 0 : Number.MIN_VALUE;
      assert.ok(
        Number.isFinite(msPerCertificate(figures)) && msPerCertificate(figures) >= least,
        figures.name,
      );
      if (policy === 'aws') {
        // Every proof went to STS; the EC2 lookups were shared (at most one call per node).
        assert.equal(figures.cloud?.sts, 30, figures.name);
        const calls = figures.cloud?.describeInstances ?? Number.NaN;
        assert.ok(calls >= 1 && calls <= 30, `${figures.name}: ${calls} DescribeInstances calls`);
      } else {
        assert.equal(figures.cloud, undefined, figures.name);
      }
    }
    const report = formatIssuanceCost(samples, options);
    assert.match(
      report,
      /^this tree, aws, keep-alive +1 +30\/30 .* DescribeInstances=\d+ throttled=\d+ STS=30$/m,
    );
    assert.match(report, /^this tree, plain, new-tls +2 +30\/30 /m);
    assert.match(report, /^aws − plain, new-tls +-?\d+\.\d{3}$/m);
    assert.match(report, /^node:https, floor, new-tls +1 +30\/30 /m);
    assert.match(report, /^hardened-server, floor, keep-alive +2 +30\/30 /m);
    assert.match(report, /^floor node:https, keep-alive +\d+\.\d{3}$/m);
    assert.match(report, /^hardened − node:https, new-tls +-?\d+\.\d{3}$/m);
    assert.match(report, /^plain − hardened, new-tls +-?\d+\.\d{3}$/m);
    assert.match(
      report,
      /^target: aws ≤ 0\.8 ms\/cert \(issue 18\); keep-alive \d+\.\d{3} \(\/target \d+\.\d{2}\); new-tls \d+\.\d{3} \(\/target \d+\.\d{2}\)$/m,
    );
  });
});
