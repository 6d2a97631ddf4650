import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatIdentifyBench, runIdentifyBench } from './identify.ts';

describe('bench/identify (smoke run)', () => {
  it('identifies 200 nodes both ways; batched in one call, per-node in one call per node', async () => {
    const result = await runIdentifyBench(200);
    assert.equal(result.batched.identified, 200);
    assert.equal(result.perNode.identified, 200);
    assert.equal(result.batched.calls, 1);
    assert.equal(result.batched.throttled, 0);
    assert.equal(result.perNode.calls, 200);
    const report = formatIdentifyBench(result);
    assert.match(report, /^batched +calls=1 /m);
    assert.match(report, /^per-node +calls=200 /m);
    assert.match(report, /^ratio +200x fewer calls/m);
  });
});
