/**
 * `linode`: kops' `x-linode-instance-id <instance id>` proof on Akamai (Linode), verified as every
 * id-only callback cloud is ({@link cloudIdPolicy}). As kops' verifier: the node name is the
 * instance's label, the certificate names are its IPv4 addresses, and the callback challenge goes to
 * its first private (RFC 1918) IPv4 address. Stronger than kops' verifier, which accepts any instance
 * of the account: the instance must carry this cluster's `kops.k8s.io/cluster:` tag and a
 * `kops.k8s.io/instance-group:` tag, and be running, booting or provisioning.
 */
import { isIP } from 'node:net';
import { linodeIds, linodeProviderIds } from '../../cloud/linode/instances.ts';
import type { Dependency } from '../dependency.ts';
import type { BootstrapPolicy } from '../types.ts';
import { addressesOfType, type CloudIdCloud, type CloudIdPolicyOptions, cloudIdPolicy } from './cloud-id.ts';

/** What a faulty Linode API is called in the node's 503 (until dependency.ts names `linode-api`). */
export const linodeDependency: Dependency = 'policy:linode';

/** The Linode side of {@link cloudIdPolicy}. */
export const linodeCloudId: CloudIdCloud = {
  name: 'linode',
  scheme: 'x-linode-instance-id',
  dependency: linodeDependency,
  parseId: (token) => linodeIds.parse(token, 'the instance id'),
  providerIds: linodeProviderIds,
  facts: (identity) => {
    // IPv4 only, as kops' verifier certifies (the identity also carries the SLAAC IPv6 the cloud
    // controller manager reports, for the kubelet's own serving CSRs).
    const internal = addressesOfType(identity, 'InternalIP').filter((ip) => isIP(ip) === 4);
    const external = addressesOfType(identity, 'ExternalIP').filter((ip) => isIP(ip) === 4);
    const label = addressesOfType(identity, 'Hostname')[0] ?? identity.instanceId;
    return {
      nodeName: label,
      dnsNames: [],
      ipAddresses: [...external, ...internal],
      challengeAddress: internal[0],
    };
  },
};

/** The `linode` policy. */
export function linodePolicy(options: CloudIdPolicyOptions): BootstrapPolicy {
  return cloudIdPolicy(linodeCloudId, options);
}
