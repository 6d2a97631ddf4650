import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  apiVersionOf,
  resourceTypeByName,
  resourceTypeOf,
  resourceTypeOfObject,
  resourceTypes,
  selectableFields,
  verbsOf,
} from './resources.ts';

test('looks types up by plural, qualified name, URL parts and object', () => {
  assert.equal(resourceTypeByName('leases.coordination.k8s.io')?.kind, 'Lease');
  assert.equal(resourceTypeByName('leases.example.com'), undefined);
  assert.equal(resourceTypeOf('', 'v1', 'leases'), undefined);
  assert.equal(
    resourceTypeOf('certificates.k8s.io', 'v1', 'certificatesigningrequests')?.shortNames[0],
    'csr',
  );
  assert.equal(resourceTypeOfObject('v1', 'Node')?.plural, 'nodes');
  assert.equal(resourceTypeOfObject('apps/v1', 'Deployment'), undefined);
  assert.equal(apiVersionOf(resourceTypeByName('leases')!), 'coordination.k8s.io/v1');
});

test('plural names are unique and review types only create', () => {
  assert.equal(new Set(resourceTypes.map((t) => t.plural)).size, resourceTypes.length);
  assert.deepEqual(verbsOf(resourceTypeByName('tokenreviews')!), ['create']);
  assert.ok(selectableFields(resourceTypeByName('pods')!).includes('spec.nodeName'));
  assert.deepEqual(selectableFields(resourceTypeByName('leases')!), ['metadata.name', 'metadata.namespace']);
});
