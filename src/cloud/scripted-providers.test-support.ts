/**
 * The Hetzner, DigitalOcean and Linode providers built against a scripted loopback API
 * (scripted-api.test-support.ts), for tests that feed them answers the simulators never give: real
 * API shapes, hostile ones. Fast retries; each API and provider is closed by the caller's closers.
 */
import { Registry } from 'prom-client';
import { createDigitalOceanProvider } from './digitalocean/provider.ts';
import { createHetznerProvider } from './hetzner/provider.ts';
import { createLinodeProvider } from './linode/provider.ts';
import { cloudCallMetrics } from './metrics.ts';
import {
  type ScriptedAnswer,
  type ScriptedApi,
  type ScriptedRequest,
  startScriptedApi,
} from './scripted-api.test-support.ts';

type Script = (request: ScriptedRequest) => ScriptedAnswer;
const fast = { retries: 0, retryDelayMs: 1, maxRetryWaitMs: 10, timeoutMs: 5_000 };

/** Builders of the three providers for `clusterName`; what they start is added to `closers`. */
export function scriptedProviders(clusterName: string, closers: Array<() => unknown>) {
  async function against<P extends { close(): unknown }>(
    script: Script,
    build: (url: string) => P,
  ): Promise<{ api: ScriptedApi; provider: P }> {
    const api = await startScriptedApi(script);
    const provider = build(api.url);
    closers.push(
      () => api.close(),
      () => provider.close(),
    );
    return { api, provider };
  }
  return {
    hetzner: async (script: Script, registry = new Registry()) => ({
      ...(await against(script, (endpoint) =>
        createHetznerProvider({
          clusterName,
          endpoint,
          token: 't',
          api: fast,
          cloudCalls: cloudCallMetrics(registry),
        }),
      )),
      registry,
    }),
    digitalOcean: (script: Script) =>
      against(script, (endpoint) =>
        createDigitalOceanProvider({ clusterName, endpoint, token: 't', api: fast }),
      ),
    linode: async (script: Script, registry = new Registry()) => ({
      ...(await against(script, (origin) =>
        createLinodeProvider({
          clusterName,
          origin,
          token: 't',
          api: fast,
          cloudCalls: cloudCallMetrics(registry),
        }),
      )),
      registry,
    }),
  };
}
