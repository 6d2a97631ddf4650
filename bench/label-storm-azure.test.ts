import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatLabelStorm, runLabelStorm } from './label-storm.ts';
import { azureStorm } from './label-storm-azure.ts';

describe('bench/label-storm-azure (smoke run)', () => {
  it('identifies 200 nodes both ways: two listings per scale set batched, one GET per node otherwise', async () => {
    const result = await runLabelStorm(azureStorm, 200);
    assert.equal(result.batched.identified, 200);
    assert.equal(result.perNode.identified, 200);
    // Five scale sets of 40 VMs: one VM page and one interface page each.
    assert.equal(result.batched.calls, 10);
    assert.equal(result.batched.throttled, 0);
    assert.equal(result.perNode.calls, 200);
    const report = formatLabelStorm(azureStorm, result);
    assert.match(report, /^batched +calls=10 /m);
    assert.match(report, /^ratio +20x fewer calls/m);
    // 200 calls fit in ARM's bucket of 250: no wait beyond it.
    assert.match(report, /^per-node needs at least 0 s under ARM's read bucket$/m);
  });
});
