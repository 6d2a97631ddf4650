import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatLabelStorm, runLabelStorm } from './label-storm.ts';
import { hetznerStorm } from './label-storm-hetzner.ts';

describe('bench/label-storm-hetzner (smoke run)', () => {
  it('identifies 120 nodes both ways: batched in three pages, per-node in one call per node', async () => {
    const result = await runLabelStorm(hetznerStorm, 120);
    assert.equal(result.batched.identified, 120);
    assert.equal(result.perNode.identified, 120);
    assert.equal(result.batched.calls, 3);
    assert.equal(result.batched.throttled, 0);
    assert.equal(result.perNode.calls, 120);
    const report = formatLabelStorm(hetznerStorm, result);
    assert.match(report, /^batched +calls=3 throttled=0 identified=120\/120 /m);
    assert.match(report, /^ratio +40x fewer calls/m);
  });
});
