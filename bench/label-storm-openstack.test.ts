import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatLabelStorm, runLabelStorm } from './label-storm.ts';
import { openstackStorm } from './label-storm-openstack.ts';

describe('bench/label-storm-openstack (smoke run)', () => {
  it('identifies 300 nodes both ways: batched with one listing page, per-node with one call each', async () => {
    const result = await runLabelStorm(openstackStorm, 300);
    assert.equal(result.batched.identified, 300);
    assert.equal(result.perNode.identified, 300);
    assert.equal(result.batched.calls, 1);
    assert.equal(result.perNode.calls, 300);
    const report = formatLabelStorm(openstackStorm, result);
    assert.match(report, /^per-node +calls=300 throttled=0 identified=300\/300 wall=\d+ms rate=\d+\/s$/m);
    assert.match(report, /^ratio +300x fewer calls/m);
  });
});
