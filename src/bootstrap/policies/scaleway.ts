/**
 * `scaleway`: kops' Scaleway verifier (upup/pkg/fi/cloudup/scaleway/verifier.go). The node sends
 * only its server id (`x-scaleway-instance-server-id <uuid>`, from its metadata service); the proof
 * is the callback challenge: the server is read from the Instance API in the cluster's zone, its
 * private addresses from IPAM (as kops), and the handler then calls the node back on the first of
 * them, port 3987, where only the machine that sent the request holds the challenge secret.
 *
 * Checked as kops does, and more strictly where no kops node is affected: the server must carry our
 * cluster's tag (kops does not check; any server of the project could otherwise join) and an
 * instance-group tag, and be running or starting (as kops' identifier requires). The request's
 * source address is not checked, as kops does not: a load balancer in front of the controller hides
 * it, which is why Scaleway uses the callback.
 *
 * A server the API does not know, of another cluster, stopped, or with no private address is a
 * denial; the Instance or IPAM API failing, throttling or timing out is a dependency fault (503).
 */

import { isIP } from 'node:net';
import type { Ipamv1 } from '@scaleway/sdk-ipam';
import type { ScalewayClients } from '../../cloud/scaleway/client.ts';
import { identityOfServer, isScalewayServerId, scalewayProviderID } from '../../cloud/scaleway/server.ts';
import { isDnsSubdomain } from '../../dns-name.ts';
import { describeError } from '../../errors.ts';
import { defaultChallengePort } from '../../protocol/challenge.ts';
import { defaultCloudLookupTimeoutMs, dependencyFault, isCloudVerdict, withDeadline } from '../dependency.ts';
import type { BootstrapPolicy, PolicyDecision } from '../types.ts';

/** Options of the `scaleway` policy. */
export interface ScalewayPolicyOptions {
  /** Our kops cluster: the server's `noprefix=kops.k8s.io/cluster=` tag must name it. */
  clusterName: string;
  /** Clients of the cluster's zone (kops reads the zone from the controller's own metadata). */
  clients: Pick<ScalewayClients, 'instance' | 'ipam' | 'call' | 'zone' | 'region'>;
  /** Deadline of the Instance and IPAM lookups together, retries included (default 10 s). */
  lookupTimeoutMs?: number;
  /** The port of the node's challenge server (default kops' 3987). */
  challengePort?: number;
}

function deny(...reasons: string[]): PolicyDecision {
  return { verdict: 'deny', reasons };
}

/** The address of an IPAM record (`10.0.0.5/22` → `10.0.0.5`). */
function addressOf(ip: Ipamv1.IP): string | undefined {
  const address = ip.address.split('/')[0] ?? '';
  return isIP(address) ? address : undefined;
}

/** The `scaleway` policy; abstains for requests without an `x-scaleway-instance-server-id` proof. */
export function scalewayPolicy(options: ScalewayPolicyOptions): BootstrapPolicy {
  const { clients } = options;
  return {
    name: 'scaleway',
    evaluate: async (request) => {
      const { proof } = request;
      if (proof.kind !== 'cloud-id' || proof.scheme !== 'x-scaleway-instance-server-id') {
        return {
          verdict: 'abstain',
          reasons: ['the request carries no x-scaleway-instance-server-id proof'],
        };
      }
      const serverId = proof.token;
      if (!isScalewayServerId(serverId))
        return deny('the x-scaleway-instance-server-id proof is not a server id');
      const lookup = async () => {
        const { server } = await clients.call('instance.getServer', () =>
          clients.instance.getServer({ zone: clients.zone, serverId }),
        );
        if (!server) return undefined;
        const identity = identityOfServer(
          scalewayProviderID({ zone: clients.zone, id: server.id }),
          server,
          options.clusterName,
        );
        // IPAM only for a server of ours: a stranger's id costs one call, not two.
        if (identity instanceof Error || (identity.state !== 'running' && identity.state !== 'pending')) {
          return { server, identity, ips: [] };
        }
        const ips = await clients.call('ipam.listIPs', () =>
          clients.ipam
            .listIPs({ region: clients.region, resourceId: server.id, isIpv6: false, zonal: clients.zone })
            .all(),
        );
        return { server, identity, ips };
      };
      let found: Awaited<ReturnType<typeof lookup>>;
      try {
        found = await withDeadline(
          lookup(),
          options.lookupTimeoutMs ?? defaultCloudLookupTimeoutMs,
          `getServer ${serverId}`,
        );
      } catch (err) {
        if (isCloudVerdict(err)) {
          return deny(
            `Scaleway does not vouch for server ${serverId} in ${clients.zone}: ${describeError(err)}`,
          );
        }
        throw dependencyFault('policy:scaleway', err);
      }
      if (!found) return deny(`Scaleway does not vouch for server ${serverId} in ${clients.zone}`);
      const { server, identity, ips } = found;
      if (identity instanceof Error) return deny(identity.message);
      if (identity.state !== 'running' && identity.state !== 'pending') {
        return deny(`server ${server.id} is ${server.state}, not running or starting`);
      }
      const addresses = ips.map(addressOf).filter((a): a is string => a !== undefined);
      const [first] = addresses;
      const port = options.challengePort ?? defaultChallengePort;
      if (first === undefined)
        return deny(
          `IPAM lists no private IPv4 address for server ${server.id}, so it cannot be called back`,
        );
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
          // kops' certificate names: the server's IPAM addresses.
          ipAddresses: addresses,
          challengeEndpoint: `${first}:${port}`,
          evidence: {
            proof: 'x-scaleway-instance-server-id',
            serverId: server.id,
            zone: clients.zone,
            project: server.project,
          },
        },
        reasons: [
          `server ${server.name} (${server.id}) of cluster ${options.clusterName} is ${server.state} in ${clients.zone}; its tags say group ${identity.instanceGroup}; it must answer the callback at ${first}:${port}`,
        ],
      };
    },
  };
}
