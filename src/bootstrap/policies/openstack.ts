/**
 * `openstack`: kops' OpenStack verifier (upup/pkg/fi/cloudup/openstack/verifier.go). The node sends
 * only its server id (`x-openstack-id <uuid>`, read from its metadata service); what makes that a
 * proof is where the request comes from: Nova must list the request's source address among the
 * server's own addresses. Checked as kops does, and more strictly where no kops node is affected:
 * the server's metadata must name this cluster (kops does not check; any server of the project could
 * otherwise join it) and an instance group, and the server must be ACTIVE.
 *
 * No callback challenge: kops runs none on OpenStack (pkg/apis/kops/model/features.go,
 * `UseChallengeCallback`), so a kops node there has no challenge server to answer it. The source
 * address is the whole proof; docs/security.md says what that trusts.
 *
 * A server Nova does not know, of another cluster, stopped, or reached from another address is a
 * denial; Nova or Keystone failing, throttling or timing out is a dependency fault (503).
 */
import { BlockList, isIP } from 'node:net';
import { openstackProviderID } from '../../cloud/openstack/cloud-groups.ts';
import { isServerId, type NovaClient } from '../../cloud/openstack/nova.ts';
import { identityOfServer, serverAddresses } from '../../cloud/openstack/server.ts';
import { isDnsSubdomain } from '../../dns-name.ts';
import { describeError } from '../../errors.ts';
import { sourceAddress } from '../../net/hardened-server.ts';
import { defaultCloudLookupTimeoutMs, dependencyFault, isCloudVerdict, withDeadline } from '../dependency.ts';
import type { BootstrapPolicy, PolicyDecision } from '../types.ts';

/** Options of the `openstack` policy. */
export interface OpenStackPolicyOptions {
  /** Our kops cluster: the server's `KubernetesCluster` metadata must name it. */
  clusterName: string;
  nova: Pick<NovaClient, 'getServer'>;
  /** Deadline of the Nova lookup, retries included (default 10 s). */
  lookupTimeoutMs?: number;
}

function deny(...reasons: string[]): PolicyDecision {
  return { verdict: 'deny', reasons };
}

/** Whether `address` is one of `addresses`, however either is spelled (IPv6 zero compression). */
function addressIn(address: string, addresses: string[]): boolean {
  const family = isIP(address);
  if (family === 0) return false;
  const list = new BlockList();
  for (const a of addresses) {
    const f = isIP(a);
    if (f !== 0) list.addAddress(a, f === 6 ? 'ipv6' : 'ipv4');
  }
  return list.check(address, family === 6 ? 'ipv6' : 'ipv4');
}

/** The `openstack` policy; abstains for requests without an `x-openstack-id` proof. */
export function openstackPolicy(options: OpenStackPolicyOptions): BootstrapPolicy {
  return {
    name: 'openstack',
    evaluate: async (request) => {
      const { proof } = request;
      if (proof.kind !== 'cloud-id' || proof.scheme !== 'x-openstack-id') {
        return { verdict: 'abstain', reasons: ['the request carries no x-openstack-id proof'] };
      }
      const serverId = proof.token;
      if (!isServerId(serverId)) return deny('the x-openstack-id proof is not a Nova server id');
      let server: Awaited<ReturnType<NovaClient['getServer']>>;
      try {
        server = await withDeadline(
          options.nova.getServer(serverId),
          options.lookupTimeoutMs ?? defaultCloudLookupTimeoutMs,
          `servers.get ${serverId}`,
        );
      } catch (err) {
        if (isCloudVerdict(err))
          return deny(`Nova does not vouch for server ${serverId}: ${describeError(err)}`);
        throw dependencyFault('policy:openstack', err);
      }
      const identity = identityOfServer(openstackProviderID(server.id), server, options.clusterName);
      if (identity instanceof Error) return deny(identity.message);
      if (identity.state !== 'running') {
        return deny(`server ${server.id} is ${server.status}, not ACTIVE`);
      }
      const addresses = serverAddresses(server).map((a) => a.address);
      const source = sourceAddress(request.remoteAddress);
      if (!addressIn(source, addresses)) {
        return deny(
          `the request comes from ${source || 'an unknown address'}, which is not an address of server ${server.id} (${addresses.join(', ') || 'none'})`,
        );
      }
      if (!isDnsSubdomain(server.name)) {
        return deny(
          `server ${server.id} is named "${server.name.slice(0, 80)}", which is not a valid node name`,
        );
      }
      return {
        verdict: 'approve',
        facts: {
          nodeName: server.name,
          instanceGroup: identity.instanceGroup,
          instanceId: server.id,
          dnsNames: [],
          // kops' certificate names: every address of the server.
          ipAddresses: addresses,
          evidence: {
            proof: 'x-openstack-id',
            serverId: server.id,
            project: server.tenant_id ?? '',
            sourceAddress: source,
          },
        },
        reasons: [
          `server ${server.name} (${server.id}) of cluster ${options.clusterName} asked from its own address ${source}; its metadata says group ${identity.instanceGroup}`,
        ],
      };
    },
  };
}
