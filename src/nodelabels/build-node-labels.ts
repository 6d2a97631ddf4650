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

/**
 * The desired labels of a node in `ig`, in kops' order of precedence (later wins):
 * 1. kubelet `nodeLabels`: the cluster's `controlPlaneKubelet` (control plane) or `kubelet` (others),
 *    merged key by key with the instance group's `kubelet`;
 * 2. role labels: APIServer → api-server + kops-controller-pki, Node → node, ControlPlane → the
 *    mandatory control-plane set, Bastion → none;
 * 3. `kops.k8s.io/instancegroup=<ig name>` (kops puts it in `spec.nodeLabels` on creation);
 * 4. the instance group's `spec.nodeLabels`.
 */
export function buildNodeLabels(cluster: Cluster, ig: InstanceGroup): Record<string, string> {
  const role = ig.spec.role;
  const clusterKubelet = role === 'ControlPlane' ? cluster.spec.controlPlaneKubelet : cluster.spec.kubelet;
  const labels: Record<string, string> = {
    ...clusterKubelet?.nodeLabels,
    ...ig.spec.kubelet?.nodeLabels,
  };
  switch (role) {
    case 'ControlPlane':
      Object.assign(labels, controlPlaneLabels);
      break;
    case 'APIServer':
      labels[roleLabels.apiServer] = '';
      labels['kops.k8s.io/kops-controller-pki'] = '';
      break;
    case 'Node':
      labels[roleLabels.node] = '';
      break;
    case 'Bastion':
      break;
    default:
      throw new InvalidInputError(`instance group ${ig.metadata.name}: unhandled role "${String(role)}"`);
  }
  labels[instanceGroupLabel] = ig.metadata.name;
  return Object.assign(labels, ig.spec.nodeLabels);
}
