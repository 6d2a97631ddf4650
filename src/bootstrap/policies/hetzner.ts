/**
 * `hetzner`: kops' `x-hetzner-id <server id>` proof on Hetzner Cloud — and {@link cloudIdPolicy}, the
 * verifier every id-only callback cloud shares (DigitalOcean and Linode use it too).
 *
 * An id-only proof is a claim, not a credential: anyone who can reach the controller can name a
 * server id. What kops checks, and this does too: the cloud's record of that server gives the node
 * name, the certificate names and the instance group, and the node must then answer the callback
 * challenge on the server's private address (the handler does that before issuing; the policy sets
 * `challengeEndpoint`). Stronger than kops' verifiers, without breaking a kops node (whose servers
 * kops labels or tags with the cluster and group): the server must carry this cluster's label/tag
 * (kops' Hetzner and Linode verifiers accept any server of the project), an instance group, and be
 * running — a proof naming another cluster's or a stopped server is denied before any challenge.
 * The record is read fresh for each request (kops: one GET per request); the request's source
 * address is not compared with the server's, as kops does not: behind the API load balancer's TLS
 * passthrough it is the balancer's, and the challenge proves control of the address instead.
 */
import { isIP } from 'node:net';
import type { ProviderIdFormat } from '../../cloud/hetzner/cluster-instances.ts';
import { hetznerProviderIds, parseHetznerServerId } from '../../cloud/hetzner/servers.ts';
import type { NodeIdentifier, NodeIdentity } from '../../cloud/types.ts';
import { describeError } from '../../errors.ts';
import { defaultChallengePort } from '../../protocol/challenge.ts';
import {
  type Dependency,
  defaultCloudLookupTimeoutMs,
  dependencyFault,
  isCloudVerdict,
  withDeadline,
} from '../dependency.ts';
import type { BootstrapPolicy, CloudIdScheme, NodeFacts, PolicyDecision } from '../types.ts';

/** The names and addresses a verified server's certificate and challenge get, per cloud. */
export interface CloudIdFacts {
  nodeName: string;
  dnsNames: string[];
  ipAddresses: string[];
  /** The private address the callback challenge is sent to; undefined when the server has none. */
  challengeAddress: string | undefined;
}

/** What one callback cloud contributes to {@link cloudIdPolicy}. */
export interface CloudIdCloud {
  /** The policy's name (`hetzner`, `digitalocean`, `linode`). */
  name: string;
  scheme: CloudIdScheme;
  /** What the node is told when the cloud API fails (dependency.ts). */
  dependency: Dependency;
  /** The server id the token names; throws InvalidInputError when it is not one. */
  parseId(token: string): string;
  providerIds: ProviderIdFormat;
  /** The node's name, SANs and challenge address from the cloud's record, as kops' verifier derives them. */
  facts(identity: NodeIdentity): CloudIdFacts;
}

/** Options every id-only cloud policy takes. */
export interface CloudIdPolicyOptions {
  /** The cloud's NodeIdentifier for this cluster (cluster label/tag, group, state checked). */
  identifier: NodeIdentifier;
  /** Deadline of the cloud lookup (default 10 s). */
  lookupTimeoutMs?: number;
  /** The port of the node's challenge server (default kops' 3987). */
  challengePort?: number;
}

function deny(...reasons: string[]): PolicyDecision {
  return { verdict: 'deny', reasons };
}

/** `host:port`, bracketing an IPv6 host. */
function endpointOf(address: string, port: number): string {
  return isIP(address) === 6 ? `[${address}]:${port}` : `${address}:${port}`;
}

/** The verifier of one id-only callback cloud; abstains for every other proof. */
export function cloudIdPolicy(cloud: CloudIdCloud, options: CloudIdPolicyOptions): BootstrapPolicy {
  return {
    name: cloud.name,
    evaluate: async (request) => {
      const { proof } = request;
      if (proof.kind !== 'cloud-id' || proof.scheme !== cloud.scheme) {
        return { verdict: 'abstain', reasons: [`the request carries no ${cloud.scheme} proof`] };
      }
      let id: string;
      try {
        id = cloud.parseId(proof.token);
      } catch (err) {
        return deny(`${cloud.scheme} proof rejected: ${describeError(err)}`);
      }
      const providerID = cloud.providerIds.format(id);
      // maxAgeMs 0: the record is read now, so a server stopped or relabelled a moment ago is seen.
      const lookup = options.identifier.identify([providerID], { maxAgeMs: 0 });
      const result = (
        await withDeadline(
          lookup,
          options.lookupTimeoutMs ?? defaultCloudLookupTimeoutMs,
          `identify ${providerID}`,
        ).catch((err: unknown) => {
          throw dependencyFault(cloud.dependency, err);
        })
      ).get(providerID);
      if (!result?.ok) {
        if (result && !isCloudVerdict(result.error)) throw dependencyFault(cloud.dependency, result.error);
        return deny(
          `the cloud does not vouch for ${providerID}: ${result ? describeError(result.error) : 'no answer'}`,
        );
      }
      const { identity } = result;
      const facts = cloud.facts(identity);
      if (!facts.challengeAddress) {
        // kops: "cannot determine challenge endpoint"; without it nothing proves the caller is the server.
        return deny(`${providerID} has no private address to send the callback challenge to`);
      }
      const nodeFacts: NodeFacts = {
        nodeName: facts.nodeName,
        instanceGroup: identity.instanceGroup,
        instanceId: identity.instanceId,
        dnsNames: facts.dnsNames,
        ipAddresses: facts.ipAddresses,
        challengeEndpoint: endpointOf(facts.challengeAddress, options.challengePort ?? defaultChallengePort),
        evidence: { proof: cloud.scheme, providerID, ...(identity.zone ? { zone: identity.zone } : {}) },
      };
      return {
        verdict: 'approve',
        facts: nodeFacts,
        reasons: [
          `${providerID} is a running server of this cluster in instance group ${identity.instanceGroup}; it must answer the callback challenge at ${nodeFacts.challengeEndpoint}`,
        ],
      };
    },
  };
}

/** What a faulty Hetzner API is called in the node's 503 (until dependency.ts names `hetzner-api`). */
export const hetznerDependency: Dependency = 'policy:hetzner';

/** The Hetzner side of {@link cloudIdPolicy}: name = server name, SANs = its IPv4 and private addresses. */
export const hetznerCloudId: CloudIdCloud = {
  name: 'hetzner',
  scheme: 'x-hetzner-id',
  dependency: hetznerDependency,
  parseId: (token) => parseHetznerServerId(token, 'the server id'),
  providerIds: hetznerProviderIds,
  facts: (identity) => {
    const internal = identity.addresses.filter((a) => a.type === 'InternalIP').map((a) => a.address);
    const external = identity.addresses.filter((a) => a.type === 'ExternalIP').map((a) => a.address);
    const hostname = identity.addresses.find((a) => a.type === 'Hostname')?.address ?? identity.instanceId;
    return {
      nodeName: hostname,
      dnsNames: [],
      // kops: the public IPv4, then every private network address; never challenged over the public one.
      ipAddresses: [...external, ...internal],
      challengeAddress: internal[0],
    };
  },
};

/** The `hetzner` policy. */
export function hetznerPolicy(options: CloudIdPolicyOptions): BootstrapPolicy {
  return cloudIdPolicy(hetznerCloudId, options);
}
