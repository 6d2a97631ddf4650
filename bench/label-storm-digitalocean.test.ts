import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatLabelStorm, runLabelStorm } from './label-storm.ts';
import { digitalOceanStorm } from './label-storm-digitalocean.ts';

describe('bench/label-storm-digitalocean (smoke run)', () => {
  it('identifies 300 nodes both ways: batched in two pages, per-node in one call per node', async () => {
    const result = await runLabelStorm(digitalOceanStorm, 300);
    assert.equal(result.batched.identified, 300);
    assert.equal(result.perNode.identified, 300);
    assert.equal(result.batched.calls, 2);
    assert.equal(result.batched.throttled, 0);
    assert.equal(result.perNode.calls, 300);
    assert.match(formatLabelStorm(digitalOceanStorm, result), /^ratio +150x fewer calls/m);
  });
});
