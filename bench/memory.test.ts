import assert from 'node:assert/strict';
import { test } from 'node:test';
import { connectionCosts, formatMemoryBench, imageMallocSettings, runMemory } from './memory.ts';

test('bench/memory (smoke run): every request served, no heap kept per request, costs measured', async () => {
  // The image gives freed memory back with fixed thresholds; the server runs with them here.
  assert.deepEqual(imageMallocSettings(), {
    MALLOC_MMAP_THRESHOLD_: '131072',
    MALLOC_TRIM_THRESHOLD_: '131072',
  });
  const run = await runMemory({ requests: 3_000, earlyAt: 1_000, settleMs: 200 });
  assert.equal(run.failures, 0);
  // 2,000 more certificates for 2,000 new node names: what the server's heap keeps for them after a
  // full collection must not grow with them (a per-node structure would add hundreds of KiB).
  const retainedGrowthMiB = run.collected.heapUsedMiB - run.earlyRetainedHeapMiB;
  assert.ok(retainedGrowthMiB < 4, `the retained heap grew ${retainedGrowthMiB.toFixed(1)} MiB`);
  const costs = await connectionCosts({ idleConnections: 100, queuedRequests: 30 });
  for (const [name, value] of Object.entries(costs)) assert.ok(Number.isFinite(value), name);
  const report = formatMemoryBench([run], costs);
  assert.match(report, /^image settings +0 /m);
  assert.match(report, /^cost {2}idle TLS connection /m);
});
