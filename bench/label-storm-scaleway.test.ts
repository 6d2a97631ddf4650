import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatLabelStorm, runLabelStorm } from './label-storm.ts';
import { scalewayStorm } from './label-storm-scaleway.ts';

describe('bench/label-storm-scaleway (smoke run)', () => {
  it('identifies 300 nodes both ways: batched in 3 calls of 100 ids and 3 IPAM listings, per-node in one call each', async () => {
    const result = await runLabelStorm(scalewayStorm, 300);
    assert.equal(result.batched.identified, 300);
    assert.equal(result.perNode.identified, 300);
    assert.equal(result.batched.calls, 6);
    assert.equal(result.perNode.calls, 300);
    assert.match(formatLabelStorm(scalewayStorm, result), /^ratio +50x fewer calls/m);
  });
});
