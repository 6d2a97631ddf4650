/**
 * The labels a node of an instance group should carry, computed as kops' `BuildNodeLabels` does
 * (pkg/nodelabels/builder.go), plus `kops.k8s.io/instancegroup`. Pure: no I/O, no clock.
 */
import { InvalidInputError } from '../errors.ts';
import type { Cluster, InstanceGroup } from '../statestore/kops-types.ts';

/** The role labels kops sets. */
export const roleLabels = {
  controlPlane: 'node-role.kubernetes.io/control-plane',
  apiServer: 'node-role.kubernetes.io/api-server',
  node: 'node-role.kubernetes.io/node',
} as const;

/** The label naming a node's instance group. */
export const instanceGroupLabel = 'kops.k8s.io/instancegroup';

/** Labels every control-plane node gets (kops' `BuildMandatoryControlPlaneLabels`). */
export const controlPlaneLabels: Readonly<Record<string, string>> = {
  [roleLabels.controlPlane]: '',
  'kops.k8s.io/kops-controller-pki': '',
  'node.kubernetes.io/exclude-from-external-load-balancers': '',
};

/** Where a desired label comes from, in increasing order of precedence. */
export type LabelSource =
  | 'cluster kubelet'
  | 'instance group kubelet'
  | 'role'
  | 'instance group name'
  | 'instance group nodeLabels';

/** One desired label and the layer that decided its value. */
export interface ExplainedLabel {
  key: string;
  value: string;
  source: LabelSource;
}

function roleLabelsOf(ig: InstanceGroup): Record<string, string> {
  switch (ig.spec.role) {
    case 'ControlPlane':
      return { ...controlPlaneLabels };
    case 'APIServer':
      return { [roleLabels.apiServer]: '', 'kops.k8s.io/kops-controller-pki': '' };
    case 'Node':
      return { [roleLabels.node]: '' };
    case 'Bastion':
      return {};
    default:
      throw new InvalidInputError(
        `instance group ${ig.metadata.name}: unhandled role "${String(ig.spec.role)}"`,
      );
  }
}

/**
 * The desired labels of a node in `ig` with the layer each comes from, sorted by key. Layers, later
 * winning (kops' order):
 * 1. kubelet `nodeLabels`: the cluster's `controlPlaneKubelet` (control plane) or `kubelet` (others),
 *    merged key by key with the instance group's `kubelet`;
 * 2. role labels: ControlPlane → the mandatory control-plane set, APIServer → api-server and
 *    kops-controller-pki, Node → node, Bastion → none;
 * 3. `kops.k8s.io/instancegroup=<ig name>` (kops writes it into `spec.nodeLabels` on creation);
 * 4. the instance group's `spec.nodeLabels`.
 */
export function explainNodeLabels(cluster: Cluster, ig: InstanceGroup): ExplainedLabel[] {
  const clusterKubelet =
    ig.spec.role === 'ControlPlane' ? cluster.spec.controlPlaneKubelet : cluster.spec.kubelet;
  const layers: [LabelSource, Readonly<Record<string, string>> | undefined][] = [
    ['cluster kubelet', clusterKubelet?.nodeLabels],
    ['instance group kubelet', ig.spec.kubelet?.nodeLabels],
    ['role', roleLabelsOf(ig)],
    ['instance group name', { [instanceGroupLabel]: ig.metadata.name }],
    ['instance group nodeLabels', ig.spec.nodeLabels],
  ];
  const result = new Map<string, ExplainedLabel>();
  for (const [source, labels] of layers) {
    for (const [key, value] of Object.entries(labels ?? {})) result.set(key, { key, value, source });
  }
  return [...result.values()].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
}

/** The desired labels of a node in `ig`, as kops' BuildNodeLabels plus the instance-group label. */
export function buildNodeLabels(cluster: Cluster, ig: InstanceGroup): Record<string, string> {
  return Object.fromEntries(explainNodeLabels(cluster, ig).map((l) => [l.key, l.value]));
}
