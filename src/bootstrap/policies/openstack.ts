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
import { sourceAddress } from '../../net/source.ts';
import { RefusalBudget } from '../refusal-budget.ts';
import type { BootstrapPolicy, PolicyDecision } from '../types.ts';
import {
  abstainWithout,
  checkRefusalBudget,
  cloudIdToken,
  deny,
  denyRejected,
  ProofRejected,
  readCloud,
  serverFacts,
} from './cloud-id.ts';

/** Options of the `openstack` policy. */
export interface OpenStackPolicyOptions {
  /** What refused ids may cost the cloud's quota (src/bootstrap/refusal-budget.ts; default one per policy). */
  refusalBudget?: RefusalBudget;
  /** Our kops cluster: the server's `KubernetesCluster` metadata must name it. */
  clusterName: string;
  nova: Pick<NovaClient, 'getServer'>;
  /** Deadline of the Nova lookup, retries included (default 10 s). */
  lookupTimeoutMs?: number;
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
  const budget = options.refusalBudget ?? new RefusalBudget();
  return {
    name: 'openstack',
    evaluate: (request) => {
      const serverId = cloudIdToken(request, 'x-openstack-id');
      if (serverId === undefined) return Promise.resolve(abstainWithout('x-openstack-id'));
      return denyRejected(() =>
        verifyServer(serverId, sourceAddress(request.remoteAddress), options, budget),
      );
    },
  };
}

/** Nova's record of the server: an ACTIVE server of this cluster, asked from one of its own addresses. */
async function verifyServer(
  serverId: string,
  source: string,
  options: OpenStackPolicyOptions,
  budget: RefusalBudget,
): Promise<PolicyDecision> {
  if (!isServerId(serverId)) return deny('the x-openstack-id proof is not a Nova server id');
  const denial = `Nova does not vouch for server ${serverId}`;
  const dependency = 'policy:openstack';
  checkRefusalBudget(budget, serverId, { scheme: 'x-openstack-id', dependency, denial });
  const server = await readCloud(options.nova.getServer(serverId), {
    call: `servers.get ${serverId}`,
    denial,
    dependency,
    timeoutMs: options.lookupTimeoutMs,
  }).catch((err: unknown) => {
    // A read Nova answered with a verdict (not found, refused) was paid for by a refusal.
    if (err instanceof ProofRejected) budget.refused(serverId, err, false);
    throw err;
  });
  const identity = identityOfServer(openstackProviderID(server.id), server, options.clusterName);
  if (identity instanceof Error) {
    budget.refused(serverId, identity);
    return deny(identity.message);
  }
  if (identity.state !== 'running') {
    const stopped = `server ${server.id} is ${server.status}, not ACTIVE`;
    budget.refused(serverId, new Error(stopped));
    return deny(stopped);
  }
  const addresses = serverAddresses(server).map((a) => a.address);
  if (!addressIn(source, addresses)) {
    // Paid for, not remembered: the server itself may join from its own address a moment later.
    budget.refused(serverId, new Error('another source'), false);
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
