/**
 * What every policy of a cloud that sends kops' `x-<cloud>-id` proof shares (Hetzner, DigitalOcean,
 * Linode, OpenStack, Scaleway, Azure): one abstain rule, one deny shape, one mapping of a cloud read
 * (the cloud's verdict on the node is a denial, the cloud failing is a dependency fault), one node-name
 * check — and {@link cloudIdPolicy}, the verifier of the id-only callback clouds (Hetzner,
 * DigitalOcean, Linode).
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

import type { ClusterServerIdentifier, ProviderIdFormat } from '../../cloud/cluster-servers.ts';
import type { IdentifyResult, NodeIdentifier, NodeIdentity } from '../../cloud/types.ts';
import { withDeadline } from '../../deadline.ts';
import { isDnsSubdomain } from '../../dns-name.ts';
import { describeError, KopsError, RateLimitedError } from '../../errors.ts';
import { challengeEndpointOf, defaultChallengePort } from '../../protocol/challenge.ts';
import type { CallTicket, CircuitBreaker } from '../circuit-breaker.ts';
import {
  type Dependency,
  defaultCloudLookupTimeoutMs,
  dependencyFault,
  isCloudVerdict,
} from '../dependency.ts';
import { LookupBudget } from '../lookup-budget.ts';
import type {
  BootstrapPolicy,
  BootstrapRequest,
  CloudIdScheme,
  NodeFacts,
  PolicyDecision,
} from '../types.ts';

export function deny(...reasons: string[]): PolicyDecision {
  return { verdict: 'deny', reasons };
}

/** The token of the request's `scheme` proof; undefined for any other proof, which the policy abstains on. */
export function cloudIdToken(request: BootstrapRequest, scheme: CloudIdScheme): string | undefined {
  const { proof } = request;
  return proof.kind === 'cloud-id' && proof.scheme === scheme ? proof.token : undefined;
}

/** The abstention of a cloud's policy on a request without its proof. */
export function abstainWithout(scheme: CloudIdScheme): PolicyDecision {
  return { verdict: 'abstain', reasons: [`the request carries no ${scheme} proof`] };
}

/** The proof does not hold (the policy turns it into a denial with this message). */
export class ProofRejected extends Error {}

/**
 * One cloud read under the lookup deadline. The cloud's verdict on the node (not found, not ours,
 * malformed) rejects the proof as `${denial}: <why>`; the cloud failing, throttling, refusing the
 * controller's own credentials or not answering in time is the dependency's fault (503), never a
 * denial. With a `circuit`, the read is not even started while the cloud has failed every read for a
 * while (circuit-breaker.ts): these reads are one per proof, and nodeup retries a fault every 10 s
 * whatever Retry-After says.
 */
export async function readCloud<T>(
  work: () => Promise<T>,
  step: {
    call: string;
    denial: string;
    dependency: Dependency;
    timeoutMs: number | undefined;
    circuit?: CircuitBreaker;
  },
): Promise<T> {
  let ticket: CallTicket | undefined;
  try {
    ticket = step.circuit?.admit();
    const result = await withDeadline(work(), step.timeoutMs ?? defaultCloudLookupTimeoutMs, step.call);
    ticket?.answered();
    return result;
  } catch (err) {
    if (isCloudVerdict(err)) {
      ticket?.answered();
      throw new ProofRejected(`${step.denial}: ${describeError(err)}`);
    }
    // Throttling is an answer too: the cloud is up, and the volume that throttles can be anyone's.
    if (err instanceof KopsError && err.kind === 'rate-limited') ticket?.answered();
    else ticket?.failed();
    throw dependencyFault(step.dependency, err);
  }
}

/** Rejects a node name the cloud records that Kubernetes would not accept for a node. */
export function checkNodeName(name: string, whose: string): string {
  if (!isDnsSubdomain(name)) {
    throw new ProofRejected(`${whose} is named "${name.slice(0, 80)}", which is not a valid node name`);
  }
  return name;
}

/**
 * The facts of a server its cloud vouched for by its id (OpenStack, Scaleway): the node name is the
 * server's name (checked), the instance id its id, the group and incarnation those of its `identity`
 * (the node identifier's, so the certificates carry the incarnation a renewal is compared with), the
 * certificate names `ipAddresses` and no DNS name.
 */
export function serverFacts(
  server: { id: string; name: string },
  identity: Pick<NodeIdentity, 'instanceGroup' | 'incarnation'>,
  ipAddresses: string[],
): Omit<NodeFacts, 'evidence'> {
  return {
    nodeName: checkNodeName(server.name, `server ${server.id}`),
    instanceGroup: identity.instanceGroup,
    instanceId: server.id,
    ...(identity.incarnation ? { incarnationId: identity.incarnation.id } : {}),
    dnsNames: [],
    ipAddresses,
  };
}

/** Runs a policy's checks; a {@link ProofRejected} becomes a denial, anything else passes through. */
export async function denyRejected(
  check: () => Promise<PolicyDecision>,
  prefix = '',
): Promise<PolicyDecision> {
  try {
    return await check();
  } catch (err) {
    if (err instanceof ProofRejected) return deny(`${prefix}${err.message}`);
    throw err;
  }
}

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
  /**
   * The cloud's NodeIdentifier for this cluster (cluster label/tag, group, state checked); with
   * `identifyListed` (ClusterServerIdentifier), proofs past the lookup budget are answered from a
   * paced list of the cluster, else they wait (503) until the budget refills.
   */
  identifier: NodeIdentifier & Partial<Pick<ClusterServerIdentifier, 'identifyListed'>>;
  /** Deadline of the cloud lookup (default 10 s). */
  lookupTimeoutMs?: number;
  /** The port of the node's challenge server (default kops' 3987). */
  challengePort?: number;
  /** What proofs may cost the cloud's quota (src/bootstrap/lookup-budget.ts; default one per policy). */
  lookupBudget?: LookupBudget;
}

/** The addresses of `identity` of one type, in the cloud's order. */
export function addressesOfType(identity: NodeIdentity, type: string): string[] {
  return identity.addresses.filter((a) => a.type === type).map((a) => a.address);
}

/** The verifier of one id-only callback cloud; abstains for every other proof. */
export function cloudIdPolicy(cloud: CloudIdCloud, options: CloudIdPolicyOptions): BootstrapPolicy {
  const budget = options.lookupBudget ?? new LookupBudget();
  return {
    name: cloud.name,
    evaluate: (request) => {
      const token = cloudIdToken(request, cloud.scheme);
      if (token === undefined) return Promise.resolve(abstainWithout(cloud.scheme));
      return denyRejected(async () => {
        const identity = await verifiedServer(cloud, options, budget, token);
        const nodeFacts = factsOfServer(cloud, options, identity);
        return {
          verdict: 'approve',
          facts: nodeFacts,
          reasons: [
            `${identity.providerID} is a running server of this cluster in instance group ${identity.instanceGroup}; it must answer the callback challenge at ${nodeFacts.challengeEndpoint}`,
          ],
        };
      });
    },
  };
}

/**
 * The cloud's record of the server the token names, read now: it is a live server of this cluster.
 * The proof is a bare id anyone can send, so what it costs the cloud is bounded by `budget`: a read
 * by id while the budget lasts, else the answer of a paced list of the cluster
 * (src/bootstrap/lookup-budget.ts).
 */
async function verifiedServer(
  cloud: CloudIdCloud,
  options: CloudIdPolicyOptions,
  budget: LookupBudget,
  token: string,
): Promise<NodeIdentity> {
  let id: string;
  try {
    id = cloud.parseId(token);
  } catch (err) {
    throw new ProofRejected(`${cloud.scheme} proof rejected: ${describeError(err)}`);
  }
  const providerID = cloud.providerIds.format(id);
  const remembered = budget.remembered(providerID);
  if (remembered) {
    throw new ProofRejected(
      `the cloud does not vouch for ${providerID}: ${describeError(remembered)} (as it answered less than a minute ago)`,
    );
  }
  const result = await withDeadline(
    lookup(options, budget, providerID),
    options.lookupTimeoutMs ?? defaultCloudLookupTimeoutMs,
    `identify ${providerID}`,
  ).catch((err: unknown) => {
    throw dependencyFault(cloud.dependency, err);
  });
  if (result?.ok) return result.identity;
  if (result && !isCloudVerdict(result.error)) throw dependencyFault(cloud.dependency, result.error);
  if (result) budget.refused(providerID, result.error);
  throw new ProofRejected(
    `the cloud does not vouch for ${providerID}: ${result ? describeError(result.error) : 'no answer'}`,
  );
}

/** One lookup of `providerID`: read now (maxAgeMs 0: a server stopped or relabelled a moment ago is seen) while the budget lasts, else from the paced list. */
async function lookup(
  options: CloudIdPolicyOptions,
  budget: LookupBudget,
  providerID: string,
): Promise<IdentifyResult | undefined> {
  if (budget.tryRead()) {
    return (await options.identifier.identify([providerID], { maxAgeMs: 0 })).get(providerID);
  }
  if (options.identifier.identifyListed) return options.identifier.identifyListed(providerID);
  throw new RateLimitedError(
    `the budget of cloud reads for ${providerID.split(':')[0]} proofs is spent; it refills one every 20 s`,
    { retryAfterSeconds: 20, details: { reason: 'lookup-budget' } },
  );
}

/** The node's facts from the verified server, with the challenge endpoint on its private address. */
function factsOfServer(
  cloud: CloudIdCloud,
  options: CloudIdPolicyOptions,
  identity: NodeIdentity,
): NodeFacts {
  const { providerID } = identity;
  const facts = cloud.facts(identity);
  if (!facts.challengeAddress) {
    // kops: "cannot determine challenge endpoint"; without it nothing proves the caller is the server.
    throw new ProofRejected(`${providerID} has no private address to send the callback challenge to`);
  }
  return {
    nodeName: checkNodeName(facts.nodeName, providerID),
    instanceGroup: identity.instanceGroup,
    instanceId: identity.instanceId,
    // The incarnation the identifier read (the server's never-reused id): the certificates carry it,
    // so their renewal is bound to this server, not to the next one given its name.
    ...(identity.incarnation ? { incarnationId: identity.incarnation.id } : {}),
    dnsNames: facts.dnsNames,
    ipAddresses: facts.ipAddresses,
    challengeEndpoint: challengeEndpointOf(
      facts.challengeAddress,
      options.challengePort ?? defaultChallengePort,
    ),
    evidence: { proof: cloud.scheme, providerID, ...(identity.zone ? { zone: identity.zone } : {}) },
  };
}
