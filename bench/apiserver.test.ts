import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatApiServerBench, runApiServerBench } from './apiserver.ts';

describe('bench/apiserver (smoke run)', () => {
  it('lists every object paged and unpaged, and every watcher receives every update', async () => {
    const result = await runApiServerBench({ nodes: 60, pods: 700, updates: 200, watchers: 3, pageSize: 50 });
    assert.deepEqual(
      result.lists.map((l) => [l.name, l.objects, l.pages]),
      [
        ['list nodes (pages of 50)', 60, 2],
        ['list nodes (unpaged)', 60, 1],
        ['list pods (pages of 50)', 700, 14],
        ['list pods (unpaged)', 700, 1],
      ],
    );
    assert.deepEqual(result.watch.received, [200, 200, 200]);
    assert.equal(result.informer.slim.cached, 700);
    assert.equal(result.informer.whole.cached, 700);
    const report = formatApiServerBench(result);
    assert.match(report, /^watch fan-out \(3 watchers\) +600 .* every watcher got every event$/m);
    assert.match(report, /^ratio +paged\/unpaged list wall time for pods: \d+\.\d\d$/m);
    assert.match(report, /^ratio +\d+\.\dx less memory with slim records$/m);
  });
});
