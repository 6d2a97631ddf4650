/**
 * `digitalocean`: kops' `x-digitalocean-droplet-id <droplet id>` proof, verified as every id-only
 * callback cloud is ({@link cloudIdPolicy}): the droplet must carry this cluster's
 * `KubernetesCluster:` tag and a `kops-instancegroup:` tag and be active or new, and the node must
 * answer the callback challenge on the droplet's private address. As kops' verifier: the node name is
 * the droplet's first private address (its name when it has none), the certificate names are its
 * private addresses, and the request's source address is not checked (kops: behind the API load
 * balancer's TLS passthrough it is the balancer's).
 */
import { doProviderIds, dropletIds } from '../../cloud/digitalocean/droplets.ts';
import type { Dependency } from '../dependency.ts';
import type { BootstrapPolicy } from '../types.ts';
import { addressesOfType, type CloudIdCloud, type CloudIdPolicyOptions, cloudIdPolicy } from './cloud-id.ts';

/** What a faulty DigitalOcean API is called in the node's 503 (until dependency.ts names `digitalocean-api`). */
export const digitalOceanDependency: Dependency = 'policy:digitalocean';

/** The DigitalOcean side of {@link cloudIdPolicy}. */
export const digitalOceanCloudId: CloudIdCloud = {
  name: 'digitalocean',
  scheme: 'x-digitalocean-droplet-id',
  dependency: digitalOceanDependency,
  parseId: (token) => dropletIds.parse(token, 'the droplet id'),
  providerIds: doProviderIds,
  facts: (identity) => {
    const internal = addressesOfType(identity, 'InternalIP');
    const name = addressesOfType(identity, 'Hostname')[0] ?? identity.instanceId;
    return {
      // kops: "Name seems a better default than the first IP, but we have to match what other components are expecting".
      nodeName: internal[0] ?? name,
      dnsNames: [],
      ipAddresses: internal,
      challengeAddress: internal[0],
    };
  },
};

/** The `digitalocean` policy. */
export function digitalOceanPolicy(options: CloudIdPolicyOptions): BootstrapPolicy {
  return cloudIdPolicy(digitalOceanCloudId, options);
}
