import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatOpenStackStorm, runOpenStackStorm } from './label-storm-openstack.ts';

describe('bench/label-storm-openstack (smoke run)', () => {
  it('identifies 300 nodes both ways: batched with one listing page, per-node with one call each', async () => {
    const result = await runOpenStackStorm(300);
    assert.equal(result.batched.identified, 300);
    assert.equal(result.perNode.identified, 300);
    assert.equal(result.batched.calls, 1);
    assert.equal(result.perNode.calls, 300);
    assert.match(formatOpenStackStorm(result), /^ratio +300x fewer calls/m);
  });
});
