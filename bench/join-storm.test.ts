import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatJoinStorm, median, runJoinStorm, type StormFigures } from './join-storm.ts';

describe('bench/join-storm (smoke run)', () => {
  it('50 nodes: every storm issues every node a certificate of its own name that verifies against the CA', async () => {
    const result = await runJoinStorm({ nodes: 50, concurrency: 50, rounds: 2 });
    if ('unavailable' in result.cfssl) assert.fail(result.cfssl.unavailable);
    assert.ok(result.aws, 'the aws storms ran');
    const { batched, perNode } = result.aws;
    const storms: StormFigures[] = [batched, perNode, ...result.plain, ...result.cfssl.storms];
    assert.equal(storms.length, 2 + 2 * 3 + 2 * 2);
    for (const storm of storms) {
      assert.equal(storm.firstFailure, undefined, `${storm.name}: ${storm.firstFailure}`);
      assert.equal(storm.verified, 50, storm.name);
      // The benchmark process's own GC pauses during the storm are measured, not guessed.
      assert.ok(
        Number.isFinite(storm.clientGcMs) && storm.clientGcMs >= 0 && storm.clientGcMs < storm.wallMs,
        `${storm.name}: client GC ${storm.clientGcMs} ms`,
      );
    }
    // Our server's event loop reports how busy it was during each of its storms; cfssl has none.
    for (const storm of [batched, perNode, ...result.plain]) {
      const busy = storm.serverLoopBusy ?? Number.NaN;
      assert.ok(busy > 0 && busy <= 1, `${storm.name}: event loop busy ${busy}`);
    }
    for (const storm of result.cfssl.storms) assert.equal(storm.serverLoopBusy, undefined);

    // The cfssl comparison ran on the same classical key exchange on both sides; the extra storm
    // got the hybrid a current client negotiates by default.
    for (const storm of [...result.plain, ...result.cfssl.storms]) {
      const expected = storm.kind === 'hybrid' ? ['X25519MLKEM768'] : ['X25519'];
      assert.deepEqual(storm.keyExchange, expected, `${storm.name} #${storm.round}`);
    }
    // Two rounds, each with every kind of storm on each side.
    assert.deepEqual(
      result.plain.map((f) => `${f.kind}#${f.round}`),
      ['keep-alive#1', 'new-tls#1', 'hybrid#1', 'keep-alive#2', 'new-tls#2', 'hybrid#2'],
    );
    assert.deepEqual(
      result.cfssl.storms.map((f) => `${f.kind}#${f.round}`),
      ['keep-alive#1', 'new-tls#1', 'keep-alive#2', 'new-tls#2'],
    );

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
    assert.match(report, /^cfssl [\d.]+, keep-alive #2 +50\/50 /m);
    assert.match(
      report,
      /^ratio +ours\/cfssl certs\/s: keep-alive [\d.]+, new connection per node [\d.]+ \(target ≥ 1\.3, median of 2 rounds\)/m,
    );
    assert.match(
      report,
      /^ratio +cfssl\/ours server CPU per certificate: keep-alive [\d.]+, new connection per node [\d.]+/m,
    );
    assert.match(report, /^ours, new TLS per node, hybrid kx #1 +50\/50 .* +\d+% +X25519MLKEM768$/m);
    assert.match(report, /^cfssl [\d.]+, keep-alive #1 +50\/50 .* +\d+ms +- +X25519$/m);
    assert.match(report, /^hybrid key exchange costs this server -?[\d.]+ ms more CPU per new connection/m);
  });

  it('the median of the rounds', () => {
    assert.equal(median([3, 1, 2]), 2);
    assert.equal(median([4, 1, 3, 2]), 2.5);
    assert.ok(Number.isNaN(median([])));
  });
});
