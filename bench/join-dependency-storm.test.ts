import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatStorm, runStorm } from './join-dependency-storm.ts';

describe('bench/join-dependency-storm (smoke run)', () => {
  it('a node joins after a short 503 storm on every API-server request, and the report says so', async () => {
    const result = await runStorm({ stormSeconds: 2, timeoutSeconds: 120 });
    assert.ok(result.joined, result.error);
    assert.ok(result.finishedAfterSeconds >= 2, 'not before the storm ended');
    assert.ok((result.dependencyFailures['kubernetes-api'] ?? 0) >= 1, JSON.stringify(result));
    assert.match(formatStorm(result), /^joined: yes, \d+\.\d s after the storm began/m);
  });
});
