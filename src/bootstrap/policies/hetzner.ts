/**
 * `hetzner`: kops' `x-hetzner-id <server id>` proof on Hetzner Cloud, verified as every id-only
 * callback cloud is ({@link cloudIdPolicy}). As kops' verifier: the node name is the server's name,
 * the certificate names are its public IPv4 and private network addresses, and the callback
 * challenge goes to its first private network address (never the public one).
 */
import { hetznerProviderIds, hetznerServerIds } from '../../cloud/hetzner/servers.ts';
import type { Dependency } from '../dependency.ts';
import type { BootstrapPolicy } from '../types.ts';
import { addressesOfType, type CloudIdCloud, type CloudIdPolicyOptions, cloudIdPolicy } from './cloud-id.ts';

/** What a faulty Hetzner API is called in the node's 503 (until dependency.ts names `hetzner-api`). */
export const hetznerDependency: Dependency = 'policy:hetzner';

/** The Hetzner side of {@link cloudIdPolicy}: name = server name, SANs = its IPv4 and private addresses. */
export const hetznerCloudId: CloudIdCloud = {
  name: 'hetzner',
  scheme: 'x-hetzner-id',
  dependency: hetznerDependency,
  parseId: (token) => hetznerServerIds.parse(token, 'the server id'),
  providerIds: hetznerProviderIds,
  facts: (identity) => {
    const internal = addressesOfType(identity, 'InternalIP');
    return {
      nodeName: addressesOfType(identity, 'Hostname')[0] ?? identity.instanceId,
      dnsNames: [],
      // kops: the public IPv4, then every private network address; never challenged over the public one.
      ipAddresses: [...addressesOfType(identity, 'ExternalIP'), ...internal],
      challengeAddress: internal[0],
    };
  },
};

/** The `hetzner` policy. */
export function hetznerPolicy(options: CloudIdPolicyOptions): BootstrapPolicy {
  return cloudIdPolicy(hetznerCloudId, options);
}
