/** Test helpers for leader-only components. */
import { CoordinationV1Api, type KubeConfig } from '@kubernetes/client-node';

/** Ends a leadership term (`leading` aborts) and says how long the component's `run` took to return, in ms. */
export async function msToStop(leading: AbortController, run: Promise<unknown>): Promise<number> {
  const abortedAt = performance.now();
  leading.abort();
  await run;
  return performance.now() - abortedAt;
}

/** Who holds the controller's Lease now (empty or undefined: nobody, or no Lease yet). */
export async function leaseHolder(
  kubeConfig: KubeConfig,
  name = 'kops-controller-leader',
  namespace = 'kube-system',
): Promise<string | undefined> {
  const lease = await kubeConfig
    .makeApiClient(CoordinationV1Api)
    .readNamespacedLease({ name, namespace })
    .catch(() => undefined);
  return lease?.spec?.holderIdentity || undefined;
}
