import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  apiGroupList,
  apiGroupOf,
  apiResourceList,
  coreApiVersions,
  openApiProtobuf,
  versionInfo,
} from './discovery.ts';

test('describes the served groups and resources', () => {
  assert.deepEqual(coreApiVersions('127.0.0.1:1')['versions'], ['v1']);
  const groups = apiGroupList()['groups'] as { name: string; preferredVersion: { groupVersion: string } }[];
  assert.ok(
    groups.some(
      (g) => g.name === 'coordination.k8s.io' && g.preferredVersion.groupVersion === 'coordination.k8s.io/v1',
    ),
  );
  assert.equal(apiGroupOf('example.com'), undefined);
  const leases = apiResourceList('coordination.k8s.io', 'v1');
  assert.equal(leases?.['groupVersion'], 'coordination.k8s.io/v1');
  const csrs = apiResourceList('certificates.k8s.io', 'v1')?.['resources'] as {
    name: string;
    verbs: string[];
  }[];
  assert.deepEqual(
    csrs.map((r) => r.name),
    [
      'certificatesigningrequests',
      'certificatesigningrequests/approval',
      'certificatesigningrequests/status',
    ],
  );
  assert.deepEqual(csrs[1]?.verbs, ['get', 'patch', 'update']);
  assert.equal(apiResourceList('', 'v2'), undefined);
  assert.match(versionInfo()['gitVersion'] ?? '', /^v1\.\d+\.\d+/);
});

test('encodes the OpenAPI document as the gnostic protobuf kubectl reads', () => {
  const bytes = openApiProtobuf();
  // field 1 (swagger) = "2.0", then field 2 (info) with title and version.
  assert.deepEqual([...bytes.subarray(0, 5)], [0x0a, 3, 0x32, 0x2e, 0x30]);
  assert.equal(bytes[5], 0x12);
  assert.equal(bytes[6], bytes.length - 7);
  assert.ok(bytes.includes(Buffer.from('Kubernetes')));
});
