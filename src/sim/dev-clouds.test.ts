import assert from 'node:assert/strict';
import { isIP } from 'node:net';
import { test } from 'node:test';
import { parseCluster, parseInstanceGroup } from '../statestore/kops-types.ts';
import { loopbackAddresses, sampleServerCluster, serverClouds } from './dev-clouds.ts';

test('a cluster’s server addresses are distinct loopback addresses, never 127.0.0.1, enough for every joining node', () => {
  const next = loopbackAddresses();
  // `dev --joining-nodes` allows 9,999, on top of the three seeded servers.
  const addresses = Array.from({ length: 10_002 }, () => next());
  assert.equal(new Set(addresses).size, addresses.length);
  for (const address of addresses) {
    assert.equal(isIP(address), 4, address);
    assert.match(address, /^127\.(?!0\.)\d+\.\d+\.(?!0$|255$)\d+$/);
  }
});

test('every server cloud’s sample cluster is a kops cluster on that cloud, with a control plane and a node group', () => {
  for (const cloud of serverClouds) {
    const sample = sampleServerCluster(cloud, 'zone-1');
    assert.equal(parseCluster(sample.cluster).spec.cloudProvider, cloud);
    const groups = sample.instanceGroups.map((text) => parseInstanceGroup(text));
    assert.deepEqual(
      groups.map((ig) => [ig.metadata.name, ig.spec.role, ig.spec.nodeLabels?.['kops.k8s.io/instancegroup']]),
      [
        ['control-plane-zone-1', 'ControlPlane', 'control-plane-zone-1'],
        ['nodes-zone-1', 'Node', 'nodes-zone-1'],
      ],
    );
  }
});
