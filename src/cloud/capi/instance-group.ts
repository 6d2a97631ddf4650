/**
 * The instance group of a Cluster API node, which the state store does not hold: kops builds it from
 * the Machine (server/node_config.go `buildInstanceGroupFromCAPI`) with the MachineDeployment's name
 * and the role Node, every other field being irrelevant to what the node gets. Pure.
 */
import type { InstanceGroup } from '../../statestore/kops-types.ts';

/** The instance group kops assumes for the nodes of MachineDeployment `deploymentName`. */
export function capiInstanceGroup(deploymentName: string): InstanceGroup {
  return {
    apiVersion: 'kops.k8s.io/v1alpha2',
    kind: 'InstanceGroup',
    metadata: { name: deploymentName },
    spec: { role: 'Node' },
  };
}
