import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatLabelStorm, runLabelStorm } from './label-storm.ts';
import { linodeStorm } from './label-storm-linode.ts';

describe('bench/label-storm-linode (smoke run)', () => {
  it('identifies 600 nodes both ways: batched in two pages, per-node in one call per node', async () => {
    const result = await runLabelStorm(linodeStorm, 600);
    assert.equal(result.batched.identified, 600);
    assert.equal(result.perNode.identified, 600);
    assert.equal(result.batched.calls, 2);
    assert.equal(result.batched.throttled, 0);
    assert.equal(result.perNode.calls, 600);
    assert.match(formatLabelStorm(linodeStorm, result), /^ratio +300x fewer calls/m);
  });
});
