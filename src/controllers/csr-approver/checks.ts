/**
 * What the kubelet CSR approver decides, as pure functions. Two kinds of request are its business:
 * - client renewals (`kubernetes.io/kube-apiserver-client-kubelet`): the node renews its own identity
 *   — the authenticated requester must be exactly the subject (`system:node:<name>` in `system:nodes`),
 *   with no names and the usages Kubernetes requires — and its instance must still be a running
 *   instance of this cluster, so a certificate stolen from a terminated machine cannot be renewed;
 * - kubelet serving certificates (`kubernetes.io/kubelet-serving`): the same requester rule, and every
 *   DNS name and IP address must belong to the node's own instance according to the cloud — not to
 *   what the node reports about itself, and not just a prefix match on the hostname.
 * Requests from anyone but a node are not its business and are ignored (the built-in approver, the
 * bootstrap queue or a human handle them). A request from a node that fails a check is denied with a
 * reason naming the check; nothing unverifiable is ever approved.
 */

import { isIP } from 'node:net';
import type { NodeIdentity } from '../../cloud/types.ts';
import { type ParsedCsr, parseCsr } from '../../pki/csr.ts';
import { bytesToIp, ipToBytes } from '../../pki/ip.ts';
import { type CsrRecord, kubeletClientSigner, kubeletServingSigner } from './csr-record.ts';
import { type ServingPolicy, servingPolicyOf, servingPolicyViolation } from './serving-policy.ts';

export { kubeletClientSigner, kubeletServingSigner } from './csr-record.ts';

const nodeUserPrefix = 'system:node:';
const nodesGroup = 'system:nodes';

/** A decision written to the CSR: the condition's reason (CamelCase) and a readable message. */
export interface Decision {
  reason: string;
  message: string;
}

/** A decision to approve or deny. */
export type Verdict = { action: 'approve' | 'deny' } & Decision;

/** The approver's view of one CSR, before any cloud lookup. */
export type Assessment =
  | { action: 'ignore'; why: string }
  | Verdict
  /** A well-formed request from a node: its instance (and names) must now be checked with the cloud. */
  | ({ action: 'verify-instance' } & InstanceCheck);

/** What the cloud must confirm: the node's instance, and for a serving certificate its names. */
export interface InstanceCheck {
  nodeName: string;
  serving: boolean;
  dnsNames: readonly string[];
  ipAddresses: readonly string[];
}

/** No serving settings: every well-formed serving request goes on to the cloud check. */
const defaultServingPolicy = servingPolicyOf({});

/** The reason of every approval this approver writes. */
export const approvedReason = 'AutoApproved';

const clientUsageSets = [
  ['client auth', 'digital signature', 'key encipherment'],
  ['client auth', 'digital signature'],
];
const servingUsageSets = [
  ['digital signature', 'key encipherment', 'server auth'],
  ['digital signature', 'server auth'],
];

function sameSet(usages: readonly string[], allowed: readonly string[]): boolean {
  const given = new Set(usages);
  return given.size === usages.length && given.size === allowed.length && allowed.every((u) => given.has(u));
}

function deny(reason: string, message: string): Verdict {
  return { action: 'deny', reason, message };
}

/** The node a requester is, when it is one: `system:node:<name>` and a member of `system:nodes`. */
export function requestingNode(username: string, groups: readonly string[]): string | undefined {
  if (!username.startsWith(nodeUserPrefix) || !groups.includes(nodesGroup)) return undefined;
  return username.slice(nodeUserPrefix.length) || undefined;
}

function parseRequest(record: CsrRecord): ParsedCsr | string {
  try {
    return parseCsr(Buffer.from(record.request, 'base64').toString('utf8'));
  } catch (err) {
    return (err as Error).message;
  }
}

/**
 * Assesses a CSR without the cloud: ignore it, decide it, or ask for its names to be verified. A
 * serving request is also held to the configured serving settings (serving-policy.ts).
 */
export function assessCsr(record: CsrRecord, policy: ServingPolicy = defaultServingPolicy): Assessment {
  if (record.decided || record.issued) return { action: 'ignore', why: 'already decided' };
  const serving = record.signerName === kubeletServingSigner;
  if (!serving && record.signerName !== kubeletClientSigner) {
    return { action: 'ignore', why: `signer ${record.signerName} is not a kubelet signer` };
  }
  const nodeName = requestingNode(record.username, record.groups);
  if (!nodeName) {
    return { action: 'ignore', why: `requester ${record.username} is not a node; left to other approvers` };
  }
  const csr = parseRequest(record);
  if (typeof csr === 'string')
    return deny('InvalidRequest', `the certificate request is not acceptable: ${csr}`);
  const { commonName, organizations } = csr.subject;
  if (commonName !== record.username) {
    return deny(
      'SubjectIsNotRequester',
      `the request is for CN=${commonName ?? '(none)'} but was made by ${record.username}; a node may only ask for its own name`,
    );
  }
  if (organizations.length !== 1 || organizations[0] !== nodesGroup) {
    return deny(
      'SubjectOrganizationNotAllowed',
      `the request's organizations are [${organizations.join(', ')}]; exactly [${nodesGroup}] is required`,
    );
  }
  const usageSets = serving ? servingUsageSets : clientUsageSets;
  if (!usageSets.some((allowed) => sameSet(record.usages, allowed))) {
    return deny(
      'UsagesNotAllowed',
      `usages [${record.usages.join(', ')}] are not allowed; use ${usageSets.map((s) => `[${s.join(', ')}]`).join(' or ')}`,
    );
  }
  const san = csr.extensions.subjectAltName;
  const dnsNames = san?.dnsNames ?? [];
  const ipAddresses = san?.ipAddresses ?? [];
  if (!serving) {
    if (san) {
      return deny('SubjectAltNamesNotAllowed', 'a kubelet client certificate carries no subjectAltName');
    }
    return { action: 'verify-instance', nodeName, serving, dnsNames: [], ipAddresses: [] };
  }
  if (san && (san.emails.length || san.uris.length || san.other)) {
    return deny(
      'SubjectAltNameTypeNotAllowed',
      'a kubelet serving certificate may name DNS names and IP addresses only (no email, URI or other names)',
    );
  }
  if (!dnsNames.length && !ipAddresses.length) {
    return deny(
      'NoSubjectAltNames',
      'a kubelet serving certificate needs at least one DNS name or IP address',
    );
  }
  const violation = servingPolicyViolation(
    { dnsNames, ipAddresses, expirationSeconds: record.expirationSeconds },
    policy,
  );
  if (violation) return violation;
  return { action: 'verify-instance', nodeName, serving, dnsNames, ipAddresses };
}

/**
 * The address an IP's text names, in one spelling: RFC 5952 for IPv6, and an IPv4-mapped address
 * (`::ffff:10.0.0.5`) as its IPv4 form, which is how Go writes it into a SAN (4 bytes). Undefined for
 * text that is no IP (an empty or garbled cloud address), which the kubelet skips too: it vouches for
 * nothing, and is not a fault that would hold every request of the node.
 */
function ipKey(text: string): string | undefined {
  if (!isIP(text)) return undefined;
  const bytes = ipToBytes(text);
  const mapped =
    bytes.length === 16 &&
    bytes.subarray(0, 10).every((b) => b === 0) &&
    bytes[10] === 0xff &&
    bytes[11] === 0xff;
  return bytesToIp(mapped ? bytes.subarray(12) : bytes);
}

const stoppedStates = new Set(['stopping', 'stopped', 'terminated']);

/**
 * Checks a request against the cloud's record of the node's instance: the instance must not be
 * stopped, the node's name must be one of that instance's own names or private addresses (so a
 * node cannot point its providerID at another instance), and every requested DNS name and IP address must be one of the
 * instance's addresses.
 */
export function assessInstance(request: InstanceCheck, identity: NodeIdentity): Verdict {
  const instance = identity.instanceId;
  if (stoppedStates.has(identity.state)) {
    return deny(
      'InstanceNotRunning',
      `instance ${instance} of node ${request.nodeName} is ${identity.state}`,
    );
  }
  // Its names: its id, DNS names and hostname, and its private addresses, which kops names nodes
  // after on DigitalOcean (do/verifier.go: the first private address, else the droplet's name).
  const hostNames = new Set([
    instance.toLowerCase(),
    ...identity.addresses
      .filter(
        (a) =>
          a.type === 'InternalDNS' ||
          a.type === 'ExternalDNS' ||
          a.type === 'Hostname' ||
          a.type === 'InternalIP',
      )
      .map((a) => a.address.toLowerCase()),
  ]);
  const nodeName = request.nodeName.toLowerCase();
  if (!hostNames.has(nodeName)) {
    return deny(
      'NodeIsNotItsInstance',
      `node ${request.nodeName} is not a name of instance ${instance} (its names: ${[...hostNames].join(', ')}); the node's providerID does not identify it`,
    );
  }
  // As the kubelet reads the Node's addresses (pkg/kubelet/certificate/kubelet.go
  // addressesToHostnamesAndIPs): a Hostname that is an IP is asked for as an IP SAN.
  const ips = new Set(
    identity.addresses
      .filter((a) => a.type === 'InternalIP' || a.type === 'ExternalIP' || a.type === 'Hostname')
      .map((a) => ipKey(a.address))
      .filter((key) => key !== undefined),
  );
  const foreign = [
    ...request.dnsNames.filter((d) => !hostNames.has(d.toLowerCase())),
    ...request.ipAddresses.filter((ip) => !ips.has(ipKey(ip) ?? '')),
  ];
  if (foreign.length) {
    return deny(
      'SubjectAltNamesNotOfInstance',
      `${foreign.join(', ')} ${foreign.length === 1 ? 'does' : 'do'} not belong to instance ${instance} of node ${request.nodeName} according to the cloud`,
    );
  }
  const message = request.serving
    ? `every name belongs to instance ${instance} (instance group ${identity.instanceGroup}) of node ${request.nodeName} according to the cloud`
    : `node ${request.nodeName} renews its own kubelet client certificate; its instance ${instance} is a running instance of this cluster`;
  return { action: 'approve', reason: approvedReason, message: `kops-controller: ${message}` };
}
