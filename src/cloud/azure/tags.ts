/** The tags kops puts on its Azure scale sets (and so on their VMs), read by identity and the verifier. */

/** The cluster a resource belongs to (kops' `TagClusterName`). */
export const azureClusterTag = 'KubernetesCluster';
/** The instance group of a scale set (kops' `InstanceGroupNameTag`). */
export const azureInstanceGroupTag = 'kops.k8s.io_instancegroup';
