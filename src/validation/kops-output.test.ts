import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { InstanceGroup } from '../statestore/kops-types.ts';
import { kopsValidationCluster } from './kops-output.ts';

const nodes = {
  apiVersion: 'kops.k8s.io/v1alpha2',
  kind: 'InstanceGroup',
  metadata: { name: 'nodes' },
  spec: { role: 'Node', minSize: 2, maxSize: 2 },
} as InstanceGroup;

/**
 * The JSON of `kops validate cluster -o json`: cmd/kops/validate_cluster.go marshals
 * pkg/validation/validate_cluster.go's types with encoding/json —
 *   ValidationCluster { Failures []*ValidationError `json:"failures,omitempty"`;
 *                       Nodes []*ValidationNode `json:"nodes,omitempty"` }
 *   ValidationError { Kind `json:"type,omitempty"`; Name `json:"name,omitempty"`;
 *                     Message `json:"message,omitempty"`;
 *                     InstanceGroup *kops.InstanceGroup `json:"instanceGroup,omitempty"` }
 *   ValidationNode { Name `json:"name,omitempty"`; Zone `json:"zone,omitempty"`; Role `json:"role,omitempty"`;
 *                    Hostname `json:"hostname,omitempty"`; Status v1.ConditionStatus `json:"status,omitempty"` }
 * (kubernetes/kops @ 268927e2). Field order follows the Go structs; empty values are left out.
 */
test('the JSON has kops’ field names, shapes and omitempty rules; the instance group is the object', () => {
  const json = JSON.stringify(
    kopsValidationCluster({
      failures: [
        {
          type: 'Node',
          reason: 'node-not-ready',
          name: 'i-1',
          message: 'node "i-1" of role "node" is not ready',
          node: 'i-1',
          instanceGroup: nodes,
        },
        { type: 'Pod', reason: 'pod-pending', name: 'kube-system/dns', message: 'pending', node: 'i-2' },
      ],
      nodes: [
        { name: 'i-1', zone: 'us-test-1a', role: 'node', hostname: 'i-1', status: 'False', ready: false },
        { name: 'i-2', zone: '', role: 'node', hostname: '', status: 'True', ready: true },
      ],
    }),
  );
  assert.equal(
    json,
    JSON.stringify({
      failures: [
        {
          type: 'Node',
          name: 'i-1',
          message: 'node "i-1" of role "node" is not ready',
          instanceGroup: {
            apiVersion: 'kops.k8s.io/v1alpha2',
            kind: 'InstanceGroup',
            metadata: { name: 'nodes' },
            spec: { role: 'Node', minSize: 2, maxSize: 2 },
          },
        },
        { type: 'Pod', name: 'kube-system/dns', message: 'pending' },
      ],
      nodes: [
        { name: 'i-1', zone: 'us-test-1a', role: 'node', hostname: 'i-1', status: 'False' },
        { name: 'i-2', role: 'node', status: 'True' },
      ],
    }),
  );
  // A ready cluster has no `failures` key at all; an empty one has no keys.
  assert.deepEqual(kopsValidationCluster({ failures: [], nodes: [] }), {});
});
