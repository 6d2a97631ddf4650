/**
 * `scaleway`: kops' Scaleway verifier (upup/pkg/fi/cloudup/scaleway/verifier.go). The node sends
 * only its server id (`x-scaleway-instance-server-id <uuid>`, from its metadata service); the proof
 * is the callback challenge: the server is read from the Instance API in the cluster's zone, its
 * IPv4 addresses from IPAM, and the handler then calls the node back on the first of them, port
 * 3987, where only the machine that sent the request holds the challenge secret.
 *
 * Which addresses, and why not kops' query. kops lists IPAM with `resource_id=<server>` and
 * `zonal=<zone>`; `zonal` selects public zoned IPs only (IPAM `ListIPsRequest.zonal`: "Only IPs that
 * are zonal, and in this zone"; CLI: `source.zonal` is "a public zoned IP"), and a Private-Network
 * address is regional and attached to the server's Private NIC, not to the server (IPAM: a resource
 * is "e.g. an Instance Private NIC"; Scaleway's cloud controller manager and Terraform provider read
 * it by `resource_type=instance_private_nic` and the NIC's id). So kops calls every node back on its
 * routed public IP and denies a server that has only Private-Network addresses. We read the server's
 * Private NICs from the Instance API and their IPv4 addresses from IPAM; the challenge goes to the
 * first, and those addresses are the certificate's. A server with no Private-Network IPv4 falls back
 * to its routed public IPv4s, as kops (kops creates servers with a routed IP and no Private NIC, so
 * its nodes keep joining): the cloud vouches for them as this server's just as much, and the TLS
 * challenge proves that whoever answers holds the key of the request. Every record must be attached
 * to this server or one of its NICs, whatever IPAM's filters did.
 *
 * Checked as kops does, and more strictly where no kops node is affected: the server must be in the
 * controller's project (`SCW_DEFAULT_PROJECT_ID`; kops does not check, and an API key that may read
 * several projects reads their servers by id too), carry our cluster's tag (kops does not check; any
 * server of the project could otherwise join) and an instance-group tag, and be running or starting
 * (as kops' identifier requires). The request's source address is not checked, as kops does not: a
 * load balancer in front of the controller hides it, which is why Scaleway uses the callback.
 *
 * A server the API does not know, of another project or cluster, not running or starting, or with no
 * IPv4 address in IPAM is a denial; the Instance or IPAM API failing, throttling or timing out (or
 * refusing the controller's own key) is a dependency fault (503).
 */

import type { Instancev1 } from '@scaleway/sdk-instance';
import type { ScalewayClients } from '../../cloud/scaleway/client.ts';
import {
  ipamAddressesOf,
  listIpamIps,
  privateNetworkAddresses,
  privateNicsOf,
  type ServerIpamAddresses,
} from '../../cloud/scaleway/ipam.ts';
import { identityOfServer, isScalewayServerId, scalewayProviderID } from '../../cloud/scaleway/server.ts';
import type { Logger } from '../../log.ts';
import { challengeEndpointOf, defaultChallengePort } from '../../protocol/challenge.ts';
import { type CircuitBreaker, circuitOf } from '../circuit-breaker.ts';
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
  /** Where pausing and resuming Instance and IPAM reads is said (circuit-breaker.ts); default nowhere. */
  logger?: Logger;
  /** The circuit of Instance and IPAM reads (default: one of the policy's own, with the breaker's defaults). */
  circuit?: CircuitBreaker;
}

/**
 * The server's IPv4 addresses from IPAM: its Private NICs' first (one listing for all of them, as
 * the node identity reads them: src/cloud/scaleway/ipam.ts), then, only when they have none, its
 * routed public IPs. Never with `zonal` (see the header). Each record must be attached to this
 * server or one of its NICs (`ipamAddressesOf`).
 */
async function ipamAddresses(
  server: Instancev1.Server,
  clients: ScalewayPolicyOptions['clients'],
): Promise<ServerIpamAddresses> {
  if (privateNicsOf(server).length > 0) {
    const found = (await privateNetworkAddresses(clients, clients.region, [server])).get(server.id) ?? [];
    if (found.length > 0) return { private: found, public: [] };
  }
  const ips = await listIpamIps(clients, 'ipam.listIPs (server)', {
    region: clients.region,
    resourceType: 'instance_server',
    resourceId: server.id,
    isIpv6: false,
  });
  return ipamAddressesOf(ips, server);
}

/** The `scaleway` policy; abstains for requests without an `x-scaleway-instance-server-id` proof. */
export function scalewayPolicy(options: ScalewayPolicyOptions): BootstrapPolicy {
  const circuit = options.circuit ?? circuitOf('the Scaleway API', options);
  return {
    name: 'scaleway',
    evaluate: (request) => {
      const serverId = cloudIdToken(request, scheme);
      if (serverId === undefined) return Promise.resolve(abstainWithout(scheme));
      return denyRejected(() => verifyServer(serverId, options, circuit));
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
  // IPAM only for a live server of ours: a stranger's id costs one call, not more.
  if (identity instanceof Error) return { server, identity, addresses: { private: [], public: [] } };
  return { server, identity, addresses: await ipamAddresses(server, clients) };
}

/** The Instance API's record of a live server of this cluster, with an IPv4 address to call back. */
async function verifyServer(
  serverId: string,
  options: ScalewayPolicyOptions,
  circuit: CircuitBreaker,
): Promise<PolicyDecision> {
  const { zone } = options.clients;
  if (!isScalewayServerId(serverId)) return deny(`the ${scheme} proof is not a server id`);
  const denial = `Scaleway does not vouch for server ${serverId} in ${zone}`;
  const found = await readCloud(() => lookupServer(serverId, options), {
    call: `getServer ${serverId}`,
    denial,
    dependency: 'policy:scaleway',
    timeoutMs: options.lookupTimeoutMs,
    circuit,
  });
  if (!found) return deny(denial);
  const { server, identity } = found;
  if (identity instanceof Error) return deny(identity.message);
  // Its Private-Network addresses, or else its routed public IPs: those used are the certificate's.
  const kind = found.addresses.private.length > 0 ? 'private-network' : 'public-routed';
  const addresses = kind === 'private-network' ? found.addresses.private : found.addresses.public;
  const [first] = addresses;
  if (first === undefined) {
    return deny(
      `IPAM lists no IPv4 address for server ${server.id} (none on its Private NICs, no routed public IP), so it cannot be called back`,
    );
  }
  const challengeEndpoint = challengeEndpointOf(first, options.challengePort ?? defaultChallengePort);
  const which =
    kind === 'private-network'
      ? 'its Private-Network address'
      : 'its routed public IP: it has no Private-Network address';
  return {
    verdict: 'approve',
    facts: {
      ...serverFacts(server, identity, addresses),
      challengeEndpoint,
      evidence: { proof: scheme, serverId: server.id, zone, project: server.project, addresses: kind },
    },
    reasons: [
      `server ${server.name} (${server.id}) of cluster ${options.clusterName} is ${server.state} in ${zone}; its tags say group ${identity.instanceGroup}; it must answer the callback challenge at ${challengeEndpoint} (${which})`,
    ],
  };
}
