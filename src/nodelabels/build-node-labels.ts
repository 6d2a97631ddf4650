/**
 * The labels a node of an instance group should carry, computed as kops' `BuildNodeLabels` does
 * (pkg/nodelabels/builder.go) on the instance group as `kops update cluster` completes it (the GPU and
 * gVisor labels of populate_instancegroup_spec.go), plus `kops.k8s.io/instancegroup`. Nothing else:
 * a label kops would not set is not set. Pure: no I/O, no clock.
 */
import { InvalidInputError } from '../errors.ts';
import { labelKeyProblem, labelValueProblem } from '../label-syntax.ts';
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

/** The label kops gives the nodes of GPU instance groups, and of gVisor ones. */
export const gpuLabel = 'kops.k8s.io/gpu';
export const gvisorLabel = 'kops.k8s.io/gvisor';

/** Where a desired label comes from, in increasing order of precedence. */
export type LabelSource =
  | 'cloud labels'
  | 'cluster kubelet'
  | 'instance group kubelet'
  | 'role'
  | 'instance group name'
  | 'instance group nodeLabels'
  | 'GPU instance group'
  | 'gVisor instance group';

/** kops feature flags (`KOPS_FEATURE_FLAGS`) that change labels. */
export interface LabelFeatures {
  /** `APIServerNodes`: control-plane nodes also get `node-role.kubernetes.io/api-server`. */
  apiServerNodes?: boolean;
}

/**
 * The label features a `KOPS_FEATURE_FLAGS` value turns on, read as kops reads it: comma-separated
 * names, each optionally prefixed `+` (on) or `-` (off), the last mention winning.
 */
export function labelFeaturesOf(kopsFeatureFlags: string | undefined): LabelFeatures {
  let apiServerNodes = false;
  for (const raw of (kopsFeatureFlags ?? '').split(',')) {
    const flag = raw.trim();
    const name = flag.replace(/^[+-]/, '');
    if (name === 'APIServerNodes') apiServerNodes = !flag.startsWith('-');
  }
  return { apiServerNodes };
}

/**
 * AWS instance families whose DescribeInstanceTypes answer carries GpuInfo (kops asks the API;
 * a pure function cannot, so the GPU families are listed): P (p2 … p6), G (g3 … g6f) and Gr.
 */
const awsGpuMachineType = /^(?:p[2-9]|g[2-9]|gr[6-9])[a-z0-9-]*\./;

const enabled = (value: unknown, ...path: string[]): boolean => {
  let node = value;
  for (const key of path)
    node = node !== null && typeof node === 'object' ? (node as Record<string, unknown>)[key] : undefined;
  return node === true;
};

/**
 * Whether kops makes `ig` a GPU group: on AWS, NVIDIA enabled (cluster or group `containerd.nvidiaGPU`)
 * on a GPU machine type; on OpenStack, NVIDIA enabled on the group. No other cloud.
 */
export function isGpuInstanceGroup(cluster: Cluster, ig: InstanceGroup): boolean {
  const igNvidia = enabled(ig.spec, 'containerd', 'nvidiaGPU', 'enabled');
  switch (cluster.spec.cloudProvider) {
    case 'aws':
      return (
        (enabled(cluster.spec, 'containerd', 'nvidiaGPU', 'enabled') || igNvidia) &&
        awsGpuMachineType.test(ig.spec.machineType ?? '')
      );
    case 'openstack':
      return igNvidia;
    default:
      return false;
  }
}

/** kops' `HasGVisor`: a Node group with `containerd.gvisor.enabled`. */
function hasGVisor(ig: InstanceGroup): boolean {
  return ig.spec.role === 'Node' && enabled(ig.spec, 'containerd', 'gvisor', 'enabled');
}

/** The label kops' Azure identifier gives every node: the cluster's name, from the VM's cluster tag. */
export const clusterNameLabel = 'kops.k8s.io/cluster';

/**
 * How each cloud's kops identifier turns an instance's tags into node labels (pkg/nodeidentity): a
 * tag key with this prefix is a label named by the rest of the key. kops writes the cluster's and
 * the group's `cloudLabels` into those tags, so a `cloudLabels` entry with the prefix is a label kops
 * applies. (Its own node-template tags carry `nodeLabels`, which layers below already give.)
 */
const cloudLabelPrefixes: Readonly<Record<string, (key: string) => string | undefined>> = {
  aws: (key) => afterPrefix(key, 'k8s.io/cluster-autoscaler/node-template/label/'),
  openstack: (key) => afterPrefix(key, 'k8s.io/cluster-autoscaler/node-template/label/'),
  hetzner: (key) => afterPrefix(key, 'node-label.kops.k8s.io.'),
  // Linode's tags are short: kops' identifier takes kops' own and the role labels as they are.
  linode: (key) =>
    key.startsWith('kops.k8s.io/') || key.startsWith('node-role.kubernetes.io/') ? key : undefined,
};

function afterPrefix(key: string, prefix: string): string | undefined {
  return key.startsWith(prefix) && key.length > prefix.length ? key.slice(prefix.length) : undefined;
}

/**
 * The labels kops' identifier of this cloud reads from the tags kops derives from `cloudLabels`
 * (the group's winning over the cluster's), and on Azure the cluster-name label. A derived label the
 * API server would refuse is left out rather than failing the whole node's patch.
 */
function cloudTagLabels(cluster: Cluster, ig: InstanceGroup): Record<string, string> {
  const labels: Record<string, string> = {};
  const cloud = cluster.spec.cloudProvider ?? '';
  if (cloud === 'azure') labels[clusterNameLabel] = cluster.metadata.name;
  const labelOf = cloudLabelPrefixes[cloud];
  if (labelOf === undefined) return labels;
  for (const [key, value] of Object.entries({ ...cluster.spec.cloudLabels, ...ig.spec.cloudLabels })) {
    const label = labelOf(key);
    if (label !== undefined && !labelKeyProblem(label) && !labelValueProblem(value)) labels[label] = value;
  }
  return labels;
}

/** One desired label and the layer that decided its value. */
export interface ExplainedLabel {
  key: string;
  value: string;
  source: LabelSource;
}

function roleLabelsOf(ig: InstanceGroup, features: LabelFeatures): Record<string, string> {
  switch (ig.spec.role) {
    case 'ControlPlane':
      return { ...(features.apiServerNodes ? { [roleLabels.apiServer]: '' } : {}), ...controlPlaneLabels };
    case 'APIServer':
      // Not kops-controller-pki: only control-plane nodes hold the kops-controller PKI.
      return { [roleLabels.apiServer]: '' };
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
 * 0. labels kops' identifier of the cloud reads from tags that come from `cloudLabels`
 *    ({@link cloudTagLabels}); kops writes the node-template tags of `nodeLabels` over them;
 * 1. kubelet `nodeLabels`: the cluster's `controlPlaneKubelet` (control plane) or `kubelet` (others),
 *    merged key by key with the instance group's `kubelet`;
 * 2. role labels: ControlPlane → the mandatory control-plane set (plus api-server with the
 *    APIServerNodes feature), APIServer → api-server, Node → node, Bastion → none;
 * 3. `kops.k8s.io/instancegroup=<ig name>` (kops writes it into `spec.nodeLabels` on creation);
 * 4. the instance group's `spec.nodeLabels`;
 * 5. what `kops update cluster` adds to `spec.nodeLabels` when it completes the group:
 *    `kops.k8s.io/gpu=1` for GPU groups, `kops.k8s.io/gvisor=1` for gVisor groups.
 */
export function explainNodeLabels(
  cluster: Cluster,
  ig: InstanceGroup,
  features: LabelFeatures = {},
): ExplainedLabel[] {
  const clusterKubelet =
    ig.spec.role === 'ControlPlane' ? cluster.spec.controlPlaneKubelet : cluster.spec.kubelet;
  const layers: [LabelSource, Readonly<Record<string, string>> | undefined][] = [
    ['cloud labels', cloudTagLabels(cluster, ig)],
    ['cluster kubelet', clusterKubelet?.nodeLabels],
    ['instance group kubelet', ig.spec.kubelet?.nodeLabels],
    ['role', roleLabelsOf(ig, features)],
    ['instance group name', { [instanceGroupLabel]: ig.metadata.name }],
    ['instance group nodeLabels', ig.spec.nodeLabels],
    ['GPU instance group', isGpuInstanceGroup(cluster, ig) ? { [gpuLabel]: '1' } : undefined],
    ['gVisor instance group', hasGVisor(ig) ? { [gvisorLabel]: '1' } : undefined],
  ];
  const result = new Map<string, ExplainedLabel>();
  for (const [source, labels] of layers) {
    for (const [key, value] of Object.entries(labels ?? {})) result.set(key, { key, value, source });
  }
  return [...result.values()].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
}

/** The desired labels of a node in `ig`, as kops' BuildNodeLabels plus the instance-group label. */
export function buildNodeLabels(
  cluster: Cluster,
  ig: InstanceGroup,
  features: LabelFeatures = {},
): Record<string, string> {
  return Object.fromEntries(explainNodeLabels(cluster, ig, features).map((l) => [l.key, l.value]));
}
