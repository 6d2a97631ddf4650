/**
 * A validation result in the shape `kops validate cluster -o json|yaml` prints, so that scripts
 * written for kops read ours: kops' pkg/validation/validate_cluster.go ValidationCluster,
 * ValidationError and ValidationNode, marshalled with Go's `omitempty` (an empty string or list is
 * left out). The typed reason and the node, component and containers a failure concerns are ours,
 * for programs in this process; kops has no such fields, so they are not printed.
 */
import type { InstanceGroup } from '../statestore/kops-types.ts';
import type { ValidationResult } from './validate-cluster.ts';

/** kops' ValidationError. */
export interface KopsValidationError {
  type?: string;
  name?: string;
  message?: string;
  instanceGroup?: InstanceGroup;
}

/** kops' ValidationNode. */
export interface KopsValidationNode {
  name?: string;
  zone?: string;
  role?: string;
  hostname?: string;
  status?: string;
}

/** kops' ValidationCluster. */
export interface KopsValidationCluster {
  failures?: KopsValidationError[];
  nodes?: KopsValidationNode[];
}

/** Go's `omitempty` for the fields these types have: strings and pointers. */
function omitEmpty<T extends object>(fields: T): T {
  return Object.fromEntries(
    Object.entries(fields).filter(([, value]) => value !== undefined && value !== ''),
  ) as T;
}

/** The kops JSON/YAML form of a result. */
export function kopsValidationCluster(result: ValidationResult): KopsValidationCluster {
  const failures = result.failures.map((f) =>
    omitEmpty<KopsValidationError>({
      type: f.type,
      name: f.name,
      message: f.message,
      instanceGroup: f.instanceGroup,
    }),
  );
  const nodes = result.nodes.map((n) =>
    omitEmpty<KopsValidationNode>({
      name: n.name,
      zone: n.zone,
      role: n.role,
      hostname: n.hostname,
      status: n.status,
    }),
  );
  const cluster: KopsValidationCluster = {};
  if (failures.length > 0) cluster.failures = failures;
  if (nodes.length > 0) cluster.nodes = nodes;
  return cluster;
}
