/**
 * The fields each served kind knows, deep enough to find unknown fields the way the API's decoder
 * does: `fieldValidation=Strict` rejects them, `Warn` (the default) and `Ignore` drop them.
 * Subtrees the simulator does not model in detail are `any`.
 */

/** The known shape of a JSON value. */
export type Shape = 'any' | { fields: Record<string, Shape> } | { items: Shape } | { values: Shape };

const any = 'any' as const;
const obj = (fields: Record<string, Shape>): Shape => ({ fields });
const list = (items: Shape): Shape => ({ items });
const anyFields = (names: string): Shape =>
  obj(
    Object.fromEntries(
      names
        .split(/\s+/)
        .filter(Boolean)
        .map((n) => [n, any]),
    ),
  );

const objectMeta = obj({
  name: any,
  generateName: any,
  namespace: any,
  selfLink: any,
  uid: any,
  resourceVersion: any,
  generation: any,
  creationTimestamp: any,
  deletionTimestamp: any,
  deletionGracePeriodSeconds: any,
  labels: { values: any },
  annotations: { values: any },
  ownerReferences: list(anyFields('apiVersion kind name uid controller blockOwnerDeletion')),
  finalizers: any,
  managedFields: any,
});

const condition = anyFields(
  'type status lastHeartbeatTime lastProbeTime lastTransitionTime lastUpdateTime reason message observedGeneration',
);

const podSpec =
  anyFields(`volumes initContainers containers ephemeralContainers restartPolicy terminationGracePeriodSeconds
  activeDeadlineSeconds dnsPolicy nodeSelector serviceAccountName serviceAccount automountServiceAccountToken nodeName
  hostNetwork hostPID hostIPC shareProcessNamespace securityContext imagePullSecrets hostname subdomain affinity
  schedulerName tolerations hostAliases priorityClassName priority dnsConfig readinessGates runtimeClassName
  enableServiceLinks preemptionPolicy overhead topologySpreadConstraints setHostnameAsFQDN os hostUsers
  schedulingGates resourceClaims resources`);
const podStatus = obj({
  ...(
    anyFields(`phase message reason nominatedNodeName hostIP hostIPs podIP podIPs startTime initContainerStatuses
    containerStatuses qosClass ephemeralContainerStatuses resize resourceClaimStatuses observedGeneration`) as {
      fields: Record<string, Shape>;
    }
  ).fields,
  conditions: list(condition),
});

/** Top-level fields of each kind besides apiVersion, kind and metadata. */
const kindFields: Record<string, Record<string, Shape>> = {
  Namespace: { spec: anyFields('finalizers'), status: obj({ phase: any, conditions: list(condition) }) },
  Node: {
    spec: obj({
      podCIDR: any,
      podCIDRs: any,
      providerID: any,
      unschedulable: any,
      taints: list(anyFields('key value effect timeAdded')),
      configSource: any,
      externalID: any,
    }),
    status: obj({
      ...(
        anyFields(`capacity allocatable phase daemonEndpoints nodeInfo images volumesInUse volumesAttached config
        runtimeHandlers features`) as { fields: Record<string, Shape> }
      ).fields,
      conditions: list(condition),
      addresses: list(anyFields('type address')),
    }),
  },
  Pod: { spec: podSpec, status: podStatus },
  Secret: { data: { values: any }, stringData: { values: any }, type: any, immutable: any },
  ConfigMap: { data: { values: any }, binaryData: { values: any }, immutable: any },
  Event: Object.fromEntries(
    `involvedObject reason message source firstTimestamp lastTimestamp count type eventTime series action related
     reportingComponent reportingInstance`
      .split(/\s+/)
      .filter(Boolean)
      .map((n) => [n, any]),
  ),
  Lease: {
    spec: anyFields(
      'holderIdentity leaseDurationSeconds acquireTime renewTime leaseTransitions strategy preferredHolder',
    ),
  },
  CertificateSigningRequest: {
    spec: anyFields('request signerName expirationSeconds usages username uid groups extra'),
    status: obj({ conditions: list(condition), certificate: any }),
  },
  // The CRDs' structural schemas: unknown fields are pruned, as the API server does for them.
  Host: { spec: anyFields('publicKey instanceGroup podCIDRs'), status: any },
  Machine: {
    spec: anyFields(
      'clusterName bootstrap infrastructureRef version providerID failureDomain nodeDrainTimeout nodeVolumeDetachTimeout nodeDeletionTimeout readinessGates',
    ),
    status: any,
  },
  MachineDeployment: {
    spec: anyFields(
      'clusterName replicas rolloutAfter selector template strategy minReadySeconds revisionHistoryLimit paused progressDeadlineSeconds machineNamingStrategy',
    ),
    status: any,
  },
  TokenReview: { spec: anyFields('token audiences'), status: any },
  SubjectAccessReview: {
    spec: obj({
      resourceAttributes: anyFields(
        'namespace verb group version resource subresource name fieldSelector labelSelector',
      ),
      nonResourceAttributes: anyFields('path verb'),
      user: any,
      groups: any,
      extra: any,
      uid: any,
    }),
    status: any,
  },
  SelfSubjectAccessReview: {
    spec: obj({
      resourceAttributes: anyFields(
        'namespace verb group version resource subresource name fieldSelector labelSelector',
      ),
      nonResourceAttributes: anyFields('path verb'),
    }),
    status: any,
  },
};

/** The shape of a whole object of a kind. */
export function shapeOfKind(kind: string): Shape {
  return obj({ apiVersion: any, kind: any, metadata: objectMeta, ...(kindFields[kind] ?? {}) });
}

/**
 * Removes fields the shape does not know from `value` (in place) and returns their paths,
 * written as the API writes them (`spec.foo`, `spec.taints[0].bar`).
 */
export function dropUnknownFields(value: unknown, shape: Shape, path = ''): string[] {
  if (shape === 'any' || value === null || typeof value !== 'object') return [];
  const unknown: string[] = [];
  if ('items' in shape) {
    if (!Array.isArray(value)) return unknown;
    for (const [i, item] of value.entries())
      unknown.push(...dropUnknownFields(item, shape.items, `${path}[${i}]`));
    return unknown;
  }
  if (Array.isArray(value)) return [];
  const record = value as Record<string, unknown>;
  for (const key of Object.keys(record)) {
    const childPath = path ? `${path}.${key}` : key;
    const child = 'values' in shape ? shape.values : shape.fields[key];
    if (child === undefined) {
      unknown.push(childPath);
      delete record[key];
    } else {
      unknown.push(...dropUnknownFields(record[key], child, childPath));
    }
  }
  return unknown;
}
