import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { benchAlgorithms, benchIssue, formatIssueBench } from './issue.ts';

describe('bench/issue (smoke run)', () => {
  it('issues certificates with both CA key types and reports sane figures', () => {
    const results = benchAlgorithms.map((algorithm) => benchIssue(algorithm, 20));
    for (const result of results) {
      assert.equal(result.iterations, 20);
      assert.ok(result.issuedPerSecond > 0 && Number.isFinite(result.issuedPerSecond));
      assert.ok(result.signsPerSecond > 0 && Number.isFinite(result.signsPerSecond));
      assert.equal(result.ratio, result.issuedPerSecond / result.signsPerSecond);
      assert.ok(result.p50Micros > 0 && result.p50Micros <= result.p99Micros);
      assert.ok(result.certificateBytes > 300 && result.certificateBytes < 1000);
    }
    const report = formatIssueBench(results);
    assert.match(report, /^ecdsa-p256 +\d+ +\d+ +\d+\.\d\d /m);
    assert.match(report, /^rsa-2048 +\d+ +\d+ +\d+\.\d\d /m);
  });
});
