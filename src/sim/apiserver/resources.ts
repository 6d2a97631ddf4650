/**
 * The resource types the simulated API server serves, described once: discovery, routing, storage
 * and error messages all read this table, so adding a type is one entry.
 */

/** A resource type as discovery describes it. */
export interface ResourceType {
  group: string;
  version: string;
  /** The plural name used in URLs and in Status details (`nodes`). */
  plural: string;
  singular: string;
  kind: string;
  namespaced: boolean;
  shortNames: string[];
  /** Subresources served under the object (`status`, `approval`). */
  subresources: string[];
  /** Create-only review types answer a POST and store nothing. */
  reviewOnly?: boolean;
}

const allVerbs = ['create', 'delete', 'deletecollection', 'get', 'list', 'patch', 'update', 'watch'];

/** Every type served, keyed by plural name (plurals are unique across the groups served). */
export const resourceTypes: readonly ResourceType[] = [
  {
    group: '',
    version: 'v1',
    plural: 'namespaces',
    singular: 'namespace',
    kind: 'Namespace',
    namespaced: false,
    shortNames: ['ns'],
    subresources: ['status'],
  },
  {
    group: '',
    version: 'v1',
    plural: 'nodes',
    singular: 'node',
    kind: 'Node',
    namespaced: false,
    shortNames: ['no'],
    subresources: ['status'],
  },
  {
    // Read by validation (kops_component_* gauges). The real API server computes these on each read;
    // here they are stored objects a test or `dev` seeds.
    group: '',
    version: 'v1',
    plural: 'componentstatuses',
    singular: 'componentstatus',
    kind: 'ComponentStatus',
    namespaced: false,
    shortNames: ['cs'],
    subresources: [],
  },
  {
    group: '',
    version: 'v1',
    plural: 'pods',
    singular: 'pod',
    kind: 'Pod',
    namespaced: true,
    shortNames: ['po'],
    subresources: ['status'],
  },
  {
    group: '',
    version: 'v1',
    plural: 'secrets',
    singular: 'secret',
    kind: 'Secret',
    namespaced: true,
    shortNames: [],
    subresources: [],
  },
  {
    group: '',
    version: 'v1',
    plural: 'configmaps',
    singular: 'configmap',
    kind: 'ConfigMap',
    namespaced: true,
    shortNames: ['cm'],
    subresources: [],
  },
  {
    group: '',
    version: 'v1',
    plural: 'events',
    singular: 'event',
    kind: 'Event',
    namespaced: true,
    shortNames: ['ev'],
    subresources: [],
  },
  {
    group: 'coordination.k8s.io',
    version: 'v1',
    plural: 'leases',
    singular: 'lease',
    kind: 'Lease',
    namespaced: true,
    shortNames: [],
    subresources: [],
  },
  {
    group: 'certificates.k8s.io',
    version: 'v1',
    plural: 'certificatesigningrequests',
    singular: 'certificatesigningrequest',
    kind: 'CertificateSigningRequest',
    namespaced: false,
    shortNames: ['csr'],
    subresources: ['approval', 'status'],
  },
  {
    // kops metal's Host (a CRD in a real cluster, k8s/crds/kops.k8s.io_hosts.yaml): served as JSON only.
    group: 'kops.k8s.io',
    version: 'v1alpha2',
    plural: 'hosts',
    singular: 'host',
    kind: 'Host',
    namespaced: true,
    shortNames: [],
    subresources: ['status'],
  },
  {
    // Cluster API (CRDs of cluster-api): what kops-controller reads in capi mode.
    group: 'cluster.x-k8s.io',
    version: 'v1beta1',
    plural: 'machines',
    singular: 'machine',
    kind: 'Machine',
    namespaced: true,
    shortNames: ['ma'],
    subresources: ['status'],
  },
  {
    group: 'cluster.x-k8s.io',
    version: 'v1beta1',
    plural: 'machinedeployments',
    singular: 'machinedeployment',
    kind: 'MachineDeployment',
    namespaced: true,
    shortNames: ['md'],
    subresources: ['status'],
  },
  {
    group: 'authentication.k8s.io',
    version: 'v1',
    plural: 'tokenreviews',
    singular: 'tokenreview',
    kind: 'TokenReview',
    namespaced: false,
    shortNames: [],
    subresources: [],
    reviewOnly: true,
  },
  {
    group: 'authorization.k8s.io',
    version: 'v1',
    plural: 'subjectaccessreviews',
    singular: 'subjectaccessreview',
    kind: 'SubjectAccessReview',
    namespaced: false,
    shortNames: [],
    subresources: [],
    reviewOnly: true,
  },
  {
    group: 'authorization.k8s.io',
    version: 'v1',
    plural: 'selfsubjectaccessreviews',
    singular: 'selfsubjectaccessreview',
    kind: 'SelfSubjectAccessReview',
    namespaced: false,
    shortNames: [],
    subresources: [],
    reviewOnly: true,
  },
];

const byPlural = new Map(resourceTypes.map((t) => [t.plural, t]));
const byGroupKind = new Map(resourceTypes.map((t) => [`${t.group}/${t.kind}`, t]));

/** The verbs a type supports, as discovery lists them. */
export function verbsOf(type: ResourceType): string[] {
  return type.reviewOnly ? ['create'] : allVerbs;
}

/** `v1` for the core group, `group/version` otherwise. */
export function apiVersionOf(type: ResourceType): string {
  return type.group ? `${type.group}/${type.version}` : type.version;
}

/** Looks a type up by its plural name, optionally qualified with its group (`leases.coordination.k8s.io`). */
export function resourceTypeByName(name: string): ResourceType | undefined {
  const type = byPlural.get(name);
  if (type) return type;
  const dot = name.indexOf('.');
  if (dot < 0) return undefined;
  const candidate = byPlural.get(name.slice(0, dot));
  return candidate?.group === name.slice(dot + 1) ? candidate : undefined;
}

/** Looks a type up by group, version and plural, as a URL names it. */
export function resourceTypeOf(group: string, version: string, plural: string): ResourceType | undefined {
  const type = byPlural.get(plural);
  return type && type.group === group && type.version === version ? type : undefined;
}

/** Looks a type up from an object's `apiVersion` and `kind`. */
export function resourceTypeOfObject(apiVersion: unknown, kind: unknown): ResourceType | undefined {
  if (typeof apiVersion !== 'string' || typeof kind !== 'string') return undefined;
  const slash = apiVersion.lastIndexOf('/');
  const group = slash < 0 ? '' : apiVersion.slice(0, slash);
  const version = slash < 0 ? apiVersion : apiVersion.slice(slash + 1);
  const type = byGroupKind.get(`${group}/${kind}`);
  return type?.version === version ? type : undefined;
}

/** The API groups served, in discovery order. */
export function servedGroups(): { name: string; version: string }[] {
  const seen = new Map<string, string>();
  for (const t of resourceTypes) if (t.group && !seen.has(t.group)) seen.set(t.group, t.version);
  return [...seen].map(([name, version]) => ({ name, version }));
}

/** Fields a field selector may name, per type, as the real API indexes them. */
const selectable: Record<string, string[]> = {
  namespaces: ['status.phase'],
  nodes: ['spec.unschedulable'],
  pods: [
    'spec.nodeName',
    'spec.restartPolicy',
    'spec.schedulerName',
    'spec.serviceAccountName',
    'status.phase',
    'status.podIP',
    'status.nominatedNodeName',
  ],
  secrets: ['type'],
  events: [
    'involvedObject.kind',
    'involvedObject.namespace',
    'involvedObject.name',
    'involvedObject.uid',
    'involvedObject.apiVersion',
    'involvedObject.resourceVersion',
    'involvedObject.fieldPath',
    'reason',
    'reportingComponent',
    'source',
    'type',
  ],
  certificatesigningrequests: ['spec.signerName'],
};

/** The fields a type can be selected by: its name, its namespace, and the type's own indexed fields. */
export function selectableFields(type: ResourceType): string[] {
  return ['metadata.name', 'metadata.namespace', ...(selectable[type.plural] ?? [])];
}
