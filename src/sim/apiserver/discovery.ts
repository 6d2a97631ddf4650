/**
 * Discovery documents (`/api`, `/apis`, `/api/v1`, `/apis/<group>/<version>`), `/version`, and the
 * OpenAPI v2 document kubectl fetches before validating a `create -f`. The OpenAPI document is
 * deliberately empty of definitions: kubectl then skips client-side schema validation, and the
 * server validates as the real one does.
 */
import { apiVersionOf, resourceTypes, servedGroups, verbsOf } from './resources.ts';

/** The Kubernetes version the simulator reports. */
export const simulatedVersion = { major: '1', minor: '33', gitVersion: 'v1.33.0-sim' };

/** `/version`. */
export function versionInfo(): Record<string, string> {
  return {
    major: simulatedVersion.major,
    minor: simulatedVersion.minor,
    gitVersion: simulatedVersion.gitVersion,
    gitCommit: '0000000000000000000000000000000000000000',
    gitTreeState: 'clean',
    buildDate: '2026-01-01T00:00:00Z',
    goVersion: 'go1.24.0',
    compiler: 'gc',
    platform: 'linux/amd64',
  };
}

/** `/api`. */
export function coreApiVersions(serverAddress: string): Record<string, unknown> {
  return {
    kind: 'APIVersions',
    versions: ['v1'],
    serverAddressByClientCIDRs: [{ clientCIDR: '0.0.0.0/0', serverAddress }],
  };
}

/** `/apis`. */
export function apiGroupList(): Record<string, unknown> {
  return {
    kind: 'APIGroupList',
    apiVersion: 'v1',
    groups: servedGroups().map(({ name, version }) => apiGroup(name, version)),
  };
}

/** `/apis/<group>`, or undefined when the group is not served. */
export function apiGroupOf(group: string): Record<string, unknown> | undefined {
  const served = servedGroups().find((g) => g.name === group);
  return served
    ? { kind: 'APIGroup', apiVersion: 'v1', ...apiGroup(served.name, served.version) }
    : undefined;
}

function apiGroup(name: string, version: string): Record<string, unknown> {
  const groupVersion = { groupVersion: `${name}/${version}`, version };
  return { name, versions: [groupVersion], preferredVersion: groupVersion };
}

/** `/api/v1` or `/apis/<group>/<version>`, or undefined when that group version is not served. */
export function apiResourceList(group: string, version: string): Record<string, unknown> | undefined {
  const types = resourceTypes.filter((t) => t.group === group && t.version === version);
  if (types.length === 0) return undefined;
  const resources: Record<string, unknown>[] = [];
  for (const t of types) {
    resources.push({
      name: t.plural,
      singularName: t.singular,
      namespaced: t.namespaced,
      kind: t.kind,
      verbs: verbsOf(t),
      ...(t.shortNames.length ? { shortNames: t.shortNames } : {}),
    });
    for (const sub of t.subresources) {
      resources.push({
        name: `${t.plural}/${sub}`,
        singularName: '',
        namespaced: t.namespaced,
        kind: t.kind,
        verbs: ['get', 'patch', 'update'],
      });
    }
  }
  return {
    kind: 'APIResourceList',
    apiVersion: 'v1',
    groupVersion: apiVersionOf(types[0] as (typeof types)[number]),
    resources,
  };
}

/** The OpenAPI v2 document as JSON. */
export function openApiJson(): Record<string, unknown> {
  return {
    swagger: '2.0',
    info: { title: 'Kubernetes', version: simulatedVersion.gitVersion },
    paths: {},
    definitions: {},
  };
}

function protoString(field: number, value: string): Buffer {
  const bytes = Buffer.from(value, 'utf8');
  return Buffer.concat([Buffer.from([(field << 3) | 2, bytes.length]), bytes]);
}

/**
 * The same document as the gnostic `openapi_v2.Document` protobuf kubectl asks for
 * (`swagger` = field 1, `info` = field 2 with title 1 and version 2).
 */
export function openApiProtobuf(): Buffer {
  const info = Buffer.concat([protoString(1, 'Kubernetes'), protoString(2, simulatedVersion.gitVersion)]);
  return Buffer.concat([protoString(1, '2.0'), Buffer.from([(2 << 3) | 2, info.length]), info]);
}
