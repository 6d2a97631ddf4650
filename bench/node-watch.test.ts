import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatNodeWatch, runNodeWatchBench } from './node-watch.ts';

describe('bench/node-watch (smoke run)', () => {
  it('syncs 500 Nodes both ways: one list shared by three consumers against one list each', async () => {
    const result = await runNodeWatchBench(500, 1);
    const [round] = result.rounds;
    assert.ok(round);
    assert.equal(round.shared.lists, 1);
    assert.equal(round['per consumer'].lists, 3);
    assert.equal(round.shared.cached, result.nodes);
    assert.equal(round['per consumer'].cached, result.nodes);
    const report = formatNodeWatch(result);
    assert.match(report, /^shared +1 +\d+\.\d\ds/m);
    assert.match(report, /^per consumer +3 +\d+\.\d\ds/m);
    assert.match(report, /^ratio +per consumer \/ shared: sync \d+\.\d\dx, client CPU \d+\.\d\dx/m);
  });
});
