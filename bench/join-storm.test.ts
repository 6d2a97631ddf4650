import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatJoinStorm, runJoinStorm, type StormFigures } from './join-storm.ts';

describe('bench/join-storm (smoke run)', () => {
  it('50 nodes: every storm issues every node a certificate of its own name that verifies against the CA', async () => {
    const result = await runJoinStorm({ nodes: 50, concurrency: 50 });
    if ('unavailable' in result.cfssl) assert.fail(result.cfssl.unavailable);
    assert.ok(result.aws, 'the aws storms ran');
    const { batched, perNode } = result.aws;
    const storms: StormFigures[] = [batched, perNode, ...result.plain, ...result.cfssl.storms];
    assert.equal(storms.length, 6);
    for (const storm of storms) {
      assert.equal(storm.firstFailure, undefined, `${storm.name}: ${storm.firstFailure}`);
      assert.equal(storm.verified, 50, storm.name);
    }

    // Both aws storms replayed every proof to STS; the batched one shared DescribeInstances calls.
    assert.equal(batched.cloud?.sts, 50);
    assert.equal(perNode.cloud?.sts, 50);
    assert.equal(perNode.cloud?.describeInstances, 50);
    const batchedCalls = batched.cloud?.describeInstances ?? Number.NaN;
    assert.ok(
      batchedCalls >= 1 && batchedCalls <= 25,
      `batched path made ${batchedCalls} DescribeInstances calls`,
    );

    const report = formatJoinStorm(result);
    assert.match(report, /^aws, batched EC2 lookups +50\/50 /m);
    assert.match(report, /^aws, per-node EC2 \(kops'\) +50\/50 .*DescribeInstances=50 /m);
    assert.match(report, /^ratio +\d+x fewer DescribeInstances/m);
    assert.match(report, /^cfssl [\d.]+, keep-alive +50\/50 /m);
    assert.match(report, /^ratio +ours\/cfssl certs\/s: keep-alive [\d.]+, new connection per node [\d.]+/m);
    assert.match(
      report,
      /^ratio +cfssl\/ours server CPU per certificate: keep-alive [\d.]+, new connection per node [\d.]+/m,
    );
  });
});
