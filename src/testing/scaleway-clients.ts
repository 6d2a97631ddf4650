/** Test support: clients of the Scaleway simulator, as the tests of the Scaleway code build them. */
import {
  createScalewayClients,
  type ScalewayClientOptions,
  type ScalewayClients,
} from '../cloud/scaleway/client.ts';
import type { ScalewaySimulator } from '../sim/scaleway/simulator.ts';

/**
 * Clients of `sim` that retry once, at once (a test of a fault does not wait for backoff);
 * `overrides` replace any option.
 */
export function simScalewayClients(
  sim: Pick<ScalewaySimulator, 'credentials'>,
  overrides: Partial<ScalewayClientOptions> = {},
): ScalewayClients {
  return createScalewayClients({
    credentials: sim.credentials,
    retryDelayMs: 1,
    maxRetryWaitMs: 5,
    retries: 1,
    ...overrides,
  });
}
