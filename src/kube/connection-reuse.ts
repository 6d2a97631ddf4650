/**
 * Keep-alive for client-node's API calls. client-node 2.0.1 builds a new undici Agent for every request,
 * so every call opens a new TCP connection and does a full TLS handshake: labelling 1,000 nodes cost
 * 1,000 handshakes, most of the time of a patch. This keeps one dispatcher per cluster and user, so calls
 * reuse pooled connections. Watches are unaffected: client-node's `Watch` builds its own.
 */
import type { KubeConfig } from '@kubernetes/client-node';

type CreateDispatcher = (cluster: { name?: string; server?: string } | null, agentOptions: object) => unknown;

const patched = new WeakSet<KubeConfig>();

/** Makes API clients made from `kubeConfig` reuse connections; returns `kubeConfig`. Idempotent. */
export function reuseConnections(kubeConfig: KubeConfig): KubeConfig {
  if (patched.has(kubeConfig)) return kubeConfig;
  const target = kubeConfig as unknown as { createDispatcher: CreateDispatcher };
  const create = target.createDispatcher.bind(kubeConfig);
  const dispatchers = new Map<string, unknown>();
  target.createDispatcher = (cluster, agentOptions) => {
    // The agent options derive from the cluster and user, so those name the dispatcher. Tokens travel in
    // headers and are re-read per request; a client certificate is fixed for the life of the KubeConfig.
    const key = JSON.stringify([cluster?.name, cluster?.server, kubeConfig.getCurrentUser()?.name]);
    if (!dispatchers.has(key)) dispatchers.set(key, create(cluster, agentOptions));
    return dispatchers.get(key);
  };
  patched.add(kubeConfig);
  return kubeConfig;
}
