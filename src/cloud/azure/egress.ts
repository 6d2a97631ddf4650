/**
 * The egress proxy (src/net/egress-proxy.ts) for the Azure SDK's pipelines. Left alone, their
 * `proxyPolicy` decides for itself: `HTTPS_PROXY || ALL_PROXY || HTTP_PROXY` for every scheme, a
 * `NO_PROXY` without CIDRs or subdomains of a bare name, and no exemption for the metadata service,
 * so the managed-identity token request to IMDS (`http://169.254.169.254/...`) went to the proxy.
 *
 * {@link egressPolicy} gives each request the project's agent for its scheme, which makes the one
 * decision, `proxyFor`'s. It runs after `proxyPolicy` and replaces the agent that policy set:
 * `additionalPolicies` cannot place a policy before it, and `ManagedIdentityCredential` replaces the
 * caller's `additionalPolicies` on the client that sends the token request. So the credential gets it
 * as its transport ({@link egressHttpClient}, which every credential of the chain is given). Clients
 * that only ever talk `https:` (ARM, Blob Storage) are given an egress agent instead (their `agent`
 * option, set before `proxyPolicy`, which then stands aside).
 */
import type { Agent as HttpsAgent } from 'node:https';
import {
  createDefaultHttpClient,
  type HttpClient,
  type PipelinePolicy,
  type PipelineRequest,
} from '@azure/core-rest-pipeline';
import { DefaultAzureCredential, type TokenCredential } from '@azure/identity';
import { egressAgent, sharedEgressAgent } from '../../net/egress-proxy.ts';

/** The name of {@link egressPolicy} in a pipeline. */
export const egressPolicyName = 'kopsEgressProxy';

/**
 * Sends each request with the egress agent for its URL's scheme: the process's shared one, or, for a
 * request with TLS settings of its own (a simulator's CA), one agent per such settings.
 */
export function egressPolicy(): PipelinePolicy {
  const withTls = new WeakMap<object, HttpsAgent>();
  const agentOf = (request: PipelineRequest) => {
    const protocol = new URL(request.url).protocol;
    const tls = request.tlsSettings;
    if (protocol !== 'https:' || tls === undefined) return sharedEgressAgent(protocol);
    let agent = withTls.get(tls);
    if (agent === undefined) {
      agent = egressAgent('https:', { keepAlive: true, ...tls });
      withTls.set(tls, agent);
    }
    return agent;
  };
  return {
    name: egressPolicyName,
    sendRequest(request, next) {
      request.agent = agentOf(request);
      return next(request);
    },
  };
}

/** The SDK's default transport, each request sent through {@link egressPolicy} last. */
export function egressHttpClient(): HttpClient {
  const transport = createDefaultHttpClient();
  const policy = egressPolicy();
  return { sendRequest: (request) => policy.sendRequest(request, (r) => transport.sendRequest(r)) };
}

/**
 * DefaultAzureCredential (managed identity, environment, workload identity) whose every request, the
 * managed-identity token request to IMDS included, honours the egress proxy as every client does.
 */
export function azureCredential(): TokenCredential {
  return new DefaultAzureCredential({ httpClient: egressHttpClient() });
}
