import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatInformerBench, runInformerBench, slimPod } from './informer.ts';

describe('bench/informer (smoke run)', () => {
  it('caches 2,000 pods both ways; slim records take a fraction of the memory', async () => {
    const result = await runInformerBench(2000);
    assert.equal(result.slim.cached, 2000);
    assert.equal(result.whole.cached, 2000);
    assert.ok(
      result.whole.heapBytes > 2 * result.slim.heapBytes,
      `whole ${result.whole.heapBytes} B vs slim ${result.slim.heapBytes} B`,
    );
    const report = formatInformerBench(result);
    assert.match(report, /^slim +cached=2000 /m);
    assert.match(report, /^ratio +\d+\.\dx less memory with slim records$/m);
  });

  it('the slim record keeps what controllers read', () => {
    assert.deepEqual(
      slimPod({
        metadata: {
          namespace: 'ns',
          name: 'p',
          labels: { a: 'b' },
          ownerReferences: [{ apiVersion: 'apps/v1', kind: 'ReplicaSet', name: 'rs', uid: 'u' }],
        },
        spec: { nodeName: 'n1', containers: [] },
        status: { phase: 'Running', conditions: [{ type: 'Ready', status: 'True' }] },
      }),
      {
        namespace: 'ns',
        name: 'p',
        phase: 'Running',
        nodeName: 'n1',
        ready: true,
        labels: { a: 'b' },
        ownerKind: 'ReplicaSet',
      },
    );
  });
});
