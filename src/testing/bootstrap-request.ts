/** Test helpers for the policies: a request with sensible defaults and a fixed clock. */
import type { BootstrapRequest, PolicyContext } from '../bootstrap/types.ts';

/** A bootstrap request with `overrides` applied; the body is empty JSON and no proof is attached. */
export function testRequest(overrides: Partial<BootstrapRequest> = {}): BootstrapRequest {
  return {
    id: 'req-1',
    body: Buffer.from('{}'),
    certificates: {},
    proof: { kind: 'none' },
    remoteAddress: '10.0.0.5',
    receivedAt: new Date('2026-03-01T12:00:00Z'),
    ...overrides,
  };
}

/** A policy context whose clock stands at `at`. */
export function contextAt(at: Date | string = '2026-03-01T12:00:00Z'): PolicyContext {
  const time = new Date(at);
  return { now: () => time };
}
