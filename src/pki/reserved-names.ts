/**
 * The names and addresses that belong to the cluster's API server (and to this controller), which no
 * node certificate may carry: a kubelet serving certificate for `kubernetes.default.svc` or the
 * service IP, signed by the cluster CA, would let its holder impersonate the API server to every pod
 * and node that trusts that CA. kOps gives the API server certificate exactly these names (nodeup's
 * kube-apiserver builder): `kubernetes`, `kubernetes.default`, `kubernetes.default.svc`,
 * `kubernetes.default.svc.<clusterDNSDomain>`, the public name, `api.internal.<cluster>`, the
 * additional SANs and the first address of the service range. Wildcard names are never issued to a
 * node either. Names compare as TLS clients compare them: case-insensitively, without a trailing
 * dot, and an IPv4 address equal to its IPv4-mapped IPv6 form (Go's net.IP.Equal).
 */
import { isIP } from 'node:net';
import { InvalidInputError } from '../errors.ts';
import { RequestRejectedError } from './csr.ts';
import { bytesToIp, ipToBytes } from './ip.ts';

/** What is reserved, normalised: lower-case names without a trailing dot, canonical addresses. */
export interface ReservedNames {
  dnsNames: ReadonlySet<string>;
  ipAddresses: ReadonlySet<string>;
}

/** What is known about the cluster's API server; every field is optional. */
export interface ClusterApiNames {
  /** The kops cluster name: reserves `api.<name>`, `api.internal.<name>`, `kops-controller.internal.<name>`. */
  clusterName?: string;
  /** `clusterDNSDomain` (default `cluster.local`, which is reserved in any case). */
  clusterDomain?: string;
  /**
   * The service ranges; the first address of each is the `kubernetes` service IP. Unknown: both
   * common defaults are reserved, kOps' 100.64.0.0/13 and kubeadm's 10.96.0.0/12.
   */
  serviceClusterIPRanges?: readonly string[];
  /** Further names or addresses of the API server: its public name, additional SANs, URL hosts. */
  apiServerHosts?: readonly string[];
}

/** The service ranges assumed when the cluster's is unknown: kOps' default and kubeadm's. */
export const defaultServiceClusterIPRanges = ['100.64.0.0/13', '10.96.0.0/12'] as const;

const defaultClusterDomain = 'cluster.local';

/** A DNS name as TLS clients match it: lower-case, without the trailing dot. */
function normalName(name: string): string {
  return name.toLowerCase().replace(/\.+$/, '');
}

/** An address's canonical text, an IPv4-mapped IPv6 address as its IPv4 form. */
function normalIp(text: string): string {
  const bytes = ipToBytes(text);
  const mapped =
    bytes.length === 16 && bytes.subarray(0, 10).every((b) => b === 0) && bytes.readUInt16BE(10) === 0xffff;
  return bytesToIp(mapped ? bytes.subarray(12) : bytes);
}

/** The first host address of a CIDR (`100.64.0.0/13` → `100.64.0.1`): the `kubernetes` service IP. */
export function firstServiceIp(cidr: string): string {
  const match = /^([^/]+)\/(\d{1,3})$/.exec(cidr.trim());
  const address = match?.[1] ?? '';
  const bytes = isIP(address) ? ipToBytes(address) : undefined;
  const prefix = Number(match?.[2]);
  if (!bytes || !(prefix >= 0 && prefix < bytes.length * 8)) {
    throw new InvalidInputError(`"${cidr}" is not a service range (an IP range such as 100.64.0.0/13)`);
  }
  for (let bit = prefix; bit < bytes.length * 8; bit++)
    bytes[bit >> 3] = (bytes[bit >> 3] as number) & ~(0x80 >> (bit & 7));
  for (let i = bytes.length - 1; i >= 0; i--) {
    bytes[i] = ((bytes[i] as number) + 1) & 0xff;
    if (bytes[i] !== 0) break;
  }
  return normalIp(bytesToIp(bytes));
}

/** The `kubernetes` service's names in a cluster domain, in kOps' order. */
export function kubernetesServiceNames(clusterDomain = defaultClusterDomain): string[] {
  return [
    'kubernetes',
    'kubernetes.default',
    'kubernetes.default.svc',
    `kubernetes.default.svc.${clusterDomain}`,
  ];
}

/** Hosts without the brackets of a URL's IPv6 literal. */
const unbracketed = (host: string) => host.replace(/^\[(.*)\]$/, '$1');

/**
 * The names of the API server's own serving certificate, as kOps' nodeup gives them: the service
 * names, `api.<cluster>` (kOps' default public name) and `api.internal.<cluster>`, the further hosts,
 * then the service IP of each range (kOps' 100.64.0.0/13 when none is given) and 127.0.0.1, for
 * clients on the machine itself. Exactly what {@link reservedNames} keeps from nodes, but for the
 * defaults: a certificate carries the cluster's one service IP, not both common guesses.
 */
export function apiServerCertificateNames(cluster: ClusterApiNames): {
  dnsNames: string[];
  ipAddresses: string[];
} {
  const hosts = [
    ...kubernetesServiceNames(cluster.clusterDomain || defaultClusterDomain),
    ...(cluster.clusterName ? [`api.${cluster.clusterName}`, `api.internal.${cluster.clusterName}`] : []),
    ...(cluster.apiServerHosts ?? []).map(unbracketed),
  ];
  const ranges = cluster.serviceClusterIPRanges?.length
    ? cluster.serviceClusterIPRanges
    : [defaultServiceClusterIPRanges[0]];
  const dnsNames = hosts.filter((host) => !isIP(host)).map(normalName);
  const ipAddresses = [
    ...ranges.map(firstServiceIp),
    '127.0.0.1',
    ...hosts.filter((host) => isIP(host)).map(normalIp),
  ];
  return { dnsNames: [...new Set(dnsNames)], ipAddresses: [...new Set(ipAddresses)] };
}

/** The reserved names and addresses of a cluster. */
export function reservedNames(cluster: ClusterApiNames = {}): ReservedNames {
  const dnsNames = new Set<string>();
  const ipAddresses = new Set<string>();
  const add = (host: string) => {
    if (!host) return;
    if (isIP(host)) ipAddresses.add(normalIp(host));
    else dnsNames.add(normalName(host));
  };
  for (const domain of new Set([defaultClusterDomain, cluster.clusterDomain || defaultClusterDomain])) {
    for (const name of kubernetesServiceNames(domain)) add(name);
  }
  if (cluster.clusterName) {
    for (const prefix of ['api', 'api.internal', 'kops-controller.internal'])
      add(`${prefix}.${cluster.clusterName}`);
  }
  const ranges = cluster.serviceClusterIPRanges?.length
    ? cluster.serviceClusterIPRanges
    : defaultServiceClusterIPRanges;
  for (const range of ranges) ipAddresses.add(firstServiceIp(range));
  for (const host of cluster.apiServerHosts ?? []) add(unbracketed(host));
  return { dnsNames, ipAddresses };
}

/** The reserved set when nothing about the cluster is known. */
export const defaultReservedNames: ReservedNames = reservedNames();

/** Why a DNS name may not be certified for a node, or undefined when it may. */
export function reservedDnsNameProblem(name: string, reserved: ReservedNames): string | undefined {
  if (name.includes('*')) return `${name} is a wildcard name; node certificates never carry one`;
  const normal = normalName(name);
  if (reserved.dnsNames.has(normal)) return `${name} is a name of the cluster's API server`;
  // A DNS name written as an address is matched as one by some TLS clients.
  if (isIP(normal) && reserved.ipAddresses.has(normalIp(normal))) {
    return `${name} is an address of the cluster's API server`;
  }
  return undefined;
}

/** Why an address may not be certified for a node, or undefined when it may. */
export function reservedIpProblem(address: string, reserved: ReservedNames): string | undefined {
  if (!isIP(address)) return undefined;
  return reserved.ipAddresses.has(normalIp(address))
    ? `${address} is an address of the cluster's API server`
    : undefined;
}

/** Names and addresses to check, and what they are (for the message). */
export interface NamesToCheck {
  what: string;
  dnsNames?: readonly string[];
  ipAddresses?: readonly string[];
}

/**
 * Refuses (RequestRejectedError, reason `reserved-name`, naming the first offending name) when any
 * of the names is reserved or a wildcard. Node names count as DNS names: a serving certificate's
 * subject CN is its node name, and TLS clients that fall back to the CN would match it.
 */
export function assertNoReservedNames(groups: readonly NamesToCheck[], reserved: ReservedNames): void {
  for (const { what, dnsNames = [], ipAddresses = [] } of groups) {
    const problem =
      dnsNames.map((name) => reservedDnsNameProblem(name, reserved)).find(Boolean) ??
      ipAddresses.map((address) => reservedIpProblem(address, reserved)).find(Boolean);
    if (problem) {
      throw new RequestRejectedError(
        'reserved-name',
        `${what}: ${problem}; it is reserved and never issued to a node`,
      );
    }
  }
}
