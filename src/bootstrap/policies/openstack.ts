/**
 * `openstack`: kops' OpenStack verifier (upup/pkg/fi/cloudup/openstack/verifier.go). The node sends
 * only its server id (`x-openstack-id <uuid>`, read from its metadata service); what makes that a
 * proof is where the request comes from: Nova must list the request's source address among the
 * server's own addresses. Checked as kops does, and more strictly where no kops node is affected:
 * the server's metadata must name this cluster (kops does not check; any server of the project could
 * otherwise join it) and an instance group, the server must be ACTIVE, and it must be in the
 * controller's own project (NovaClient.getServer compares its `tenant_id` with the Keystone token's
 * project: an admin token is shown any project's server by id).
 *
 * No callback challenge: kops runs none on OpenStack (pkg/apis/kops/model/features.go,
 * `UseChallengeCallback`), so a kops node there has no challenge server to answer it. The source
 * address is the whole proof; docs/security.md says what that trusts.
 *
 * A server Nova does not know, of another project or cluster, stopped, or reached from another address is a
 * denial; Nova or Keystone failing, throttling or timing out is a dependency fault (503).
 */
import { BlockList, isIP } from 'node:net';
import { openstackProviderID } from '../../cloud/openstack/cloud-groups.ts';
import { isServerId, type NovaClient } from '../../cloud/openstack/nova.ts';
import { identityOfServer, serverAddresses } from '../../cloud/openstack/server.ts';
import type { Logger } from '../../log.ts';
import { sourceAddress } from '../../net/source.ts';
import { type CircuitBreaker, circuitOf } from '../circuit-breaker.ts';
import type { BootstrapPolicy, PolicyDecision } from '../types.ts';
import { abstainWithout, cloudIdToken, deny, denyRejected, readCloud, serverFacts } from './cloud-id.ts';

/** Options of the `openstack` policy. */
export interface OpenStackPolicyOptions {
  /** Our kops cluster: the server's `KubernetesCluster` metadata must name it. */
  clusterName: string;
  nova: Pick<NovaClient, 'getServer'>;
  /** Deadline of the Nova lookup, retries included (default 10 s). */
  lookupTimeoutMs?: number;
  /** Where pausing and resuming Nova reads is said (circuit-breaker.ts); default nowhere. */
  logger?: Logger;
  /** The circuit of Nova reads (default: one of the policy's own, with the breaker's defaults). */
  circuit?: CircuitBreaker;
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
  const circuit = options.circuit ?? circuitOf('the OpenStack compute API', options);
  return {
    name: 'openstack',
    evaluate: (request) => {
      const serverId = cloudIdToken(request, 'x-openstack-id');
      if (serverId === undefined) return Promise.resolve(abstainWithout('x-openstack-id'));
      return denyRejected(() =>
        verifyServer(serverId, sourceAddress(request.remoteAddress), options, circuit),
      );
    },
  };
}

/** Nova's record of the server: an ACTIVE server of this cluster, asked from one of its own addresses. */
async function verifyServer(
  serverId: string,
  source: string,
  options: OpenStackPolicyOptions,
  circuit: CircuitBreaker,
): Promise<PolicyDecision> {
  if (!isServerId(serverId)) return deny('the x-openstack-id proof is not a Nova server id');
  const server = await readCloud(() => options.nova.getServer(serverId), {
    call: `servers.get ${serverId}`,
    denial: `Nova does not vouch for server ${serverId}`,
    dependency: 'policy:openstack',
    timeoutMs: options.lookupTimeoutMs,
    circuit,
  });
  const identity = identityOfServer(openstackProviderID(server.id), server, options.clusterName);
  if (identity instanceof Error) return deny(identity.message);
  if (identity.state !== 'running') return deny(`server ${server.id} is ${server.status}, not ACTIVE`);
  const addresses = serverAddresses(server).map((a) => a.address);
  if (!addressIn(source, addresses)) {
    return deny(
      `the request comes from ${source || 'an unknown address'}, which is not an address of server ${server.id} (${addresses.join(', ') || 'none'})`,
    );
  }
  return {
    verdict: 'approve',
    facts: {
      // kops' certificate names: every address of the server.
      ...serverFacts(server, identity, addresses),
      // The source address is the whole proof: only a first join, as kops (ErrAlreadyExists).
      firstJoinOnly: true,
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
}
