/**
 * `scaleway`: kops' Scaleway verifier (upup/pkg/fi/cloudup/scaleway/verifier.go). The node sends
 * only its server id (`x-scaleway-instance-server-id <uuid>`, from its metadata service); the proof
 * is the callback challenge: the server is read from the Instance API in the cluster's zone, its
 * private addresses from IPAM (as kops), and the handler then calls the node back on the first of
 * them, port 3987, where only the machine that sent the request holds the challenge secret.
 *
 * Checked as kops does, and more strictly where no kops node is affected: the server must be in the
 * controller's project (`SCW_DEFAULT_PROJECT_ID`; kops does not check, and an API key that may read
 * several projects reads their servers by id too), carry our cluster's tag (kops does not check; any
 * server of the project could otherwise join) and an instance-group tag, and be running or starting
 * (as kops' identifier requires). The request's source address is not checked, as kops does not: a
 * load balancer in front of the controller hides it, which is why Scaleway uses the callback.
 *
 * A server the API does not know, of another project or cluster, not running or starting, or with no
 * private address is a denial; the Instance or IPAM API failing, throttling or timing out (or
 * refusing the controller's own key) is a dependency fault (503).
 */

import { isIP } from 'node:net';
import type { Ipamv1 } from '@scaleway/sdk-ipam';
import type { ScalewayClients } from '../../cloud/scaleway/client.ts';
import { identityOfServer, isScalewayServerId, scalewayProviderID } from '../../cloud/scaleway/server.ts';
import { challengeEndpointOf, defaultChallengePort } from '../../protocol/challenge.ts';
import type { BootstrapPolicy, PolicyDecision } from '../types.ts';
import { abstainWithout, cloudIdToken, deny, denyRejected, readCloud, serverFacts } from './cloud-id.ts';

/** Options of the `scaleway` policy. */
export interface ScalewayPolicyOptions {
  /** Our kops cluster: the server's `noprefix=kops.k8s.io/cluster=` tag must name it. */
  clusterName: string;
  /**
   * Clients of the cluster's zone (kops reads the zone from the controller's own metadata); the
   * server must be in their project.
   */
  clients: Pick<ScalewayClients, 'instance' | 'ipam' | 'call' | 'zone' | 'region' | 'projectId'>;
  /** Deadline of the Instance and IPAM lookups together, retries included (default 10 s). */
  lookupTimeoutMs?: number;
  /** The port of the node's challenge server (default kops' 3987). */
  challengePort?: number;
}

/** The address of an IPAM record (`10.0.0.5/22` → `10.0.0.5`). */
function addressOf(ip: Ipamv1.IP): string | undefined {
  const address = ip.address.split('/')[0] ?? '';
  return isIP(address) ? address : undefined;
}

/** The `scaleway` policy; abstains for requests without an `x-scaleway-instance-server-id` proof. */
export function scalewayPolicy(options: ScalewayPolicyOptions): BootstrapPolicy {
  return {
    name: 'scaleway',
    evaluate: (request) => {
      const serverId = cloudIdToken(request, scheme);
      if (serverId === undefined) return Promise.resolve(abstainWithout(scheme));
      return denyRejected(() => verifyServer(serverId, options));
    },
  };
}

const scheme = 'x-scaleway-instance-server-id';

/** The server and, for a live one of ours, its IPAM addresses, read within one deadline. */
async function lookupServer(serverId: string, options: ScalewayPolicyOptions) {
  const { clients } = options;
  const { server } = await clients.call('instance.getServer', () =>
    clients.instance.getServer({ zone: clients.zone, serverId }),
  );
  if (!server) return undefined;
  // Our project, our cluster's tag, running or starting, a group: identityOfServer checks them all.
  const identity = identityOfServer(
    scalewayProviderID({ zone: clients.zone, id: server.id }),
    server,
    options.clusterName,
    clients.projectId,
  );
  // IPAM only for a live server of ours: a stranger's id costs one call, not two.
  if (identity instanceof Error) return { server, identity, ips: [] };
  const ips = await clients.call('ipam.listIPs', () =>
    clients.ipam
      .listIPs({ region: clients.region, resourceId: server.id, isIpv6: false, zonal: clients.zone })
      .all(),
  );
  return { server, identity, ips };
}

/** The Instance API's record of a live server of this cluster, with a private address to call back. */
async function verifyServer(serverId: string, options: ScalewayPolicyOptions): Promise<PolicyDecision> {
  const { zone } = options.clients;
  if (!isScalewayServerId(serverId)) return deny(`the ${scheme} proof is not a server id`);
  const denial = `Scaleway does not vouch for server ${serverId} in ${zone}`;
  const found = await readCloud(lookupServer(serverId, options), {
    call: `getServer ${serverId}`,
    denial,
    dependency: 'policy:scaleway',
    timeoutMs: options.lookupTimeoutMs,
  });
  if (!found) return deny(denial);
  const { server, identity, ips } = found;
  if (identity instanceof Error) return deny(identity.message);
  const addresses = ips.map(addressOf).filter((a): a is string => a !== undefined);
  const [first] = addresses;
  if (first === undefined) {
    return deny(`IPAM lists no private IPv4 address for server ${server.id}, so it cannot be called back`);
  }
  const challengeEndpoint = challengeEndpointOf(first, options.challengePort ?? defaultChallengePort);
  return {
    verdict: 'approve',
    facts: {
      // kops' certificate names: the server's IPAM addresses.
      ...serverFacts(server, identity.instanceGroup, addresses),
      challengeEndpoint,
      evidence: { proof: scheme, serverId: server.id, zone, project: server.project },
    },
    reasons: [
      `server ${server.name} (${server.id}) of cluster ${options.clusterName} is ${server.state} in ${zone}; its tags say group ${identity.instanceGroup}; it must answer the callback challenge at ${challengeEndpoint}`,
    ],
  };
}
