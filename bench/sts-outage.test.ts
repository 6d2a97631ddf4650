import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CircuitBreaker } from '../src/bootstrap/circuit-breaker.ts';
import { formatOutage, runOutage } from './sts-outage.ts';

describe('bench/sts-outage (smoke run)', () => {
  it('nodes that ignore Retry-After cost a failing STS fewer replays once paused, and all join after it recovers', async () => {
    const options = { nodes: 8, outageSeconds: 3, retrySeconds: 0.2 };
    const previous = await runOutage('previous', options);
    // A circuit that opens sooner than the product's 5 s, so that the run stays short.
    const circuit = new CircuitBreaker({
      name: 'STS',
      failuresToOpen: 5,
      minFailingMs: 500,
      probeIntervalMs: 1_000,
    });
    const paused = await runOutage('paused', { ...options, circuit });
    assert.equal(previous.joined, 8);
    assert.equal(paused.joined, 8);
    assert.ok(
      paused.replaysInSecondHalf < previous.replaysInSecondHalf / 4,
      `${paused.replaysInSecondHalf} against ${previous.replaysInSecondHalf}`,
    );
    assert.ok(paused.retried > 0 && previous.retried > 0);
    assert.match(
      formatOutage([previous, paused], options),
      /^ratio +(\d+x fewer replays a second once paused|none once paused, against \d+ a second);/m,
    );
  });
});
