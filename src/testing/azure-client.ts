/** Test support: an ARM client of the Azure simulator, as the tests of the Azure code build it. */
import type { Registry } from 'prom-client';
import { AzureClient, type AzureClientOptions } from '../cloud/azure/client.ts';
import { cloudCallMetrics } from '../cloud/metrics.ts';
import type { AzureSimulator } from '../sim/azure/simulator.ts';

/**
 * A client of `sim`'s ARM without the SDK's retries (a test sees each answer), its calls counted in
 * `registry` when given; `overrides` replace any other option (another endpoint, a timeout).
 */
export function simAzureClient(
  sim: Pick<AzureSimulator, 'clientOptions'>,
  options: { registry?: Registry | undefined } & Partial<AzureClientOptions> = {},
): AzureClient {
  const { registry, ...overrides } = options;
  return new AzureClient({
    ...sim.clientOptions,
    maxRetries: 0,
    ...(registry ? { cloudCalls: cloudCallMetrics(registry) } : {}),
    ...overrides,
  });
}
