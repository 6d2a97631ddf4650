/**
 * The file `pki apply` reads: the whole cluster's certificates declared at once — the control plane
 * (API server, controller manager, scheduler), the administrators and every node with its names and
 * addresses — and what it turns into: one wanted entry per certificate, with its kubeconfig where
 * the certificate is a client's. Pure: parsing and validation only, nothing is read or issued here.
 */
import { isIP } from 'node:net';
import { z } from 'zod';
import { parseDuration } from '../config/duration.ts';
import { InvalidInputError } from '../errors.ts';
import { describeIssue, yamlTextValue } from '../parse-problems.ts';
import { nodeFilePath } from './folder.ts';
import { validateServerUrl } from './kubeconfig.ts';
import {
  absoluteLifetimeBounds,
  type ProfileName,
  profileNamed,
  type VerifiedIdentity,
  validateDnsName,
} from './profiles.ts';
import {
  apiServerCertificateNames,
  firstServiceIp,
  type ReservedNames,
  reservedNames,
} from './reserved-names.ts';

const dnsName = z.string().refine((name) => {
  try {
    validateDnsName(name);
    return true;
  } catch {
    return false;
  }
}, 'is not a valid DNS name (lower-case letters, digits, "-" and ".")');

const ipAddress = z.string().refine((address) => isIP(address) !== 0, 'is not an IP address');

const lifetime = z.string().transform((value, ctx) => {
  try {
    const ms = parseDuration(value);
    if (ms < absoluteLifetimeBounds.minMs || ms > absoluteLifetimeBounds.maxMs) {
      ctx.addIssue({ code: 'custom', message: `lifetime ${value} is outside 10m..10920h` });
      return z.NEVER;
    }
    return ms;
  } catch (err) {
    ctx.addIssue({ code: 'custom', message: (err as Error).message });
    return z.NEVER;
  }
});

const serverUrl = z.string().refine((url) => {
  try {
    validateServerUrl(url);
    return true;
  } catch {
    return false;
  }
}, 'must be an https:// URL with a host and nothing after the path');

const serviceRange = z.string().refine((range) => {
  try {
    firstServiceIp(range);
    return true;
  } catch {
    return false;
  }
}, 'is not an IP range such as 100.64.0.0/13');

/** The control-plane components `pki apply` issues for. */
export const controlPlaneComponents = [
  'kube-apiserver',
  'kube-controller-manager',
  'kube-scheduler',
] as const;
/** The certificates a node may hold. */
export const nodeComponents = ['kubelet', 'kubelet-server', 'kube-proxy', 'kube-router'] as const;

const applySchema = z.strictObject({
  cluster: z
    .strictObject({
      /** The kOps cluster name: the API server is also `api.<name>` and `api.internal.<name>`. */
      name: dnsName.optional(),
      dnsDomain: dnsName.default('cluster.local'),
      serviceClusterIPRange: z.union([serviceRange, z.array(serviceRange).min(1)]).optional(),
    })
    .default({ dnsDomain: 'cluster.local' }),
  /** The API server URL in the nodes' and administrators' kubeconfigs (default https://api.<cluster>). */
  server: serverUrl.optional(),
  controlPlane: z
    .strictObject({
      components: z.array(z.enum(controlPlaneComponents)).default([...controlPlaneComponents]),
      /** Further names of the API server (a load balancer's, additional SANs). */
      names: z.array(dnsName).default([]),
      /** Addresses of the API server (its machines, a load balancer). */
      addresses: z.array(ipAddress).default([]),
      /** Where the controller manager and scheduler reach the API server (as kOps: on their machine). */
      server: serverUrl.default('https://127.0.0.1'),
      lifetime: lifetime.optional(),
    })
    .optional(),
  admins: z.array(z.strictObject({ name: dnsName, lifetime: lifetime.optional() })).default([]),
  nodes: z
    .array(
      z.strictObject({
        name: dnsName,
        names: z.array(dnsName).default([]),
        addresses: z.array(ipAddress).default([]),
        /** Default: kubelet and kube-proxy, and kubelet-server when the node has names or addresses. */
        components: z.array(z.enum(nodeComponents)).min(1).optional(),
        lifetime: lifetime.optional(),
      }),
    )
    .default([]),
});

/** The parsed file. */
export type ApplySpec = z.infer<typeof applySchema>;

/** One certificate `pki apply` keeps in the folder, and the kubeconfig that carries it. */
export interface WantedEntry {
  /** The files' path without extension: `<path>.crt`, `<path>.key`, `<path>.kubeconfig`. */
  path: string;
  profile: ProfileName;
  identity: VerifiedIdentity;
  /** Requested lifetime; the profile's default when absent. */
  lifetimeMs?: number;
  kubeconfig?: { server: string; user: string };
  /** For the certificates nodes hold: the API server's names and addresses, which they never carry. */
  reserved?: ReservedNames;
}

/** Parses and validates the text of an apply file (YAML or JSON); `source` names it in errors. */
export function parseApplySpec(text: string, source: string): ApplySpec {
  const value = yamlTextValue(text, source, (message, cause) => new InvalidInputError(message, { cause }));
  const result = applySchema.safeParse(value ?? {});
  if (!result.success) {
    throw new InvalidInputError(`${source}: ${result.error.issues.map(describeIssue).join('; ')}`);
  }
  const spec = result.data;
  const seen = new Set<string>();
  for (const [list, entries] of [
    ['nodes', spec.nodes],
    ['admins', spec.admins],
  ] as const) {
    for (const [i, { name }] of entries.entries()) {
      if (seen.has(`${list}/${name}`)) {
        throw new InvalidInputError(`${source}: ${list}[${i}].name: "${name}" is listed twice`);
      }
      seen.add(`${list}/${name}`);
    }
  }
  const needsServer = spec.nodes.length > 0 || spec.admins.length > 0;
  if (needsServer && !spec.server && !spec.cluster.name) {
    throw new InvalidInputError(
      `${source}: server: the kubeconfigs of nodes and admins need the API server URL; set server (or cluster.name for https://api.<name>)`,
    );
  }
  return spec;
}

const kubeconfigUsers: Partial<Record<ProfileName, string>> = {
  'kube-proxy': 'system:kube-proxy',
  'kube-router': 'system:kube-router',
  'kube-controller-manager': 'system:kube-controller-manager',
  'kube-scheduler': 'system:kube-scheduler',
};

/** Every certificate the file asks for, in a stable order: control plane, admins, nodes. */
export function wantedEntries(spec: ApplySpec): WantedEntry[] {
  const server = spec.server ?? `https://api.${spec.cluster.name}`;
  const lifetimeOf = (ms: number | undefined) => (ms === undefined ? {} : { lifetimeMs: ms });
  const entries: WantedEntry[] = [];
  const controlPlane = spec.controlPlane;
  const cluster = {
    ...(spec.cluster.name ? { clusterName: spec.cluster.name } : {}),
    clusterDomain: spec.cluster.dnsDomain,
    serviceClusterIPRanges: [spec.cluster.serviceClusterIPRange ?? []].flat(),
    apiServerHosts: [...(controlPlane?.names ?? []), ...(controlPlane?.addresses ?? [])],
  };
  // The file knows the cluster's API server, so its nodes are held to all of its names.
  const reserved = reservedNames(cluster);
  for (const component of controlPlane?.components ?? []) {
    const isServer = component === 'kube-apiserver';
    const names = isServer ? apiServerCertificateNames(cluster) : undefined;
    entries.push({
      path: `control-plane/${component}`,
      profile: component,
      identity: { name: component, ...names },
      ...lifetimeOf(controlPlane?.lifetime),
      ...(isServer
        ? {}
        : {
            kubeconfig: {
              server: controlPlane?.server as string,
              user: kubeconfigUsers[component] as string,
            },
          }),
    });
  }
  for (const admin of spec.admins) {
    entries.push({
      path: `admins/${admin.name}`,
      profile: 'admin',
      identity: { name: admin.name },
      ...lifetimeOf(admin.lifetime),
      kubeconfig: { server, user: admin.name },
    });
  }
  for (const node of spec.nodes) {
    const hasNames = node.names.length > 0 || node.addresses.length > 0;
    const components =
      node.components ?? (hasNames ? ['kubelet', 'kubelet-server', 'kube-proxy'] : ['kubelet', 'kube-proxy']);
    for (const component of new Set(components)) {
      const client = profileNamed(component).usage === 'client';
      entries.push({
        path: nodeFilePath(node.name, component),
        profile: component,
        identity: { name: node.name, dnsNames: node.names, ipAddresses: node.addresses },
        ...lifetimeOf(node.lifetime),
        reserved,
        ...(client
          ? {
              kubeconfig: {
                server,
                user: kubeconfigUsers[component] ?? `system:node:${node.name}`,
              },
            }
          : {}),
      });
    }
  }
  return entries;
}
