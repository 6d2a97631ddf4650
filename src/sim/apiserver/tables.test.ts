import assert from 'node:assert/strict';
import { test } from 'node:test';
import { resourceTypeByName } from './resources.ts';
import type { StoredEntry } from './store.ts';
import { humanAge, tableJson, wantsTable } from './tables.ts';

test('recognizes kubectl table requests', () => {
  assert.equal(wantsTable('application/json;as=Table;v=v1;g=meta.k8s.io,application/json'), true);
  assert.equal(wantsTable('application/json'), false);
  assert.equal(wantsTable(undefined), false);
});

test('prints ages like kubectl', () => {
  assert.deepEqual(
    [
      5_000,
      150_000,
      3_600_000,
      5 * 3_600_000 + 60_000,
      30 * 3_600_000,
      3 * 86_400_000 + 3_600_000,
      20 * 86_400_000,
    ].map(humanAge),
    ['5s', '2m30s', '60m', '5h1m', '30h', '3d1h', '20d'],
  );
});

test('renders node rows with status, roles and version', () => {
  const object = {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name: 'n1',
      labels: { 'node-role.kubernetes.io/control-plane': '' },
      creationTimestamp: new Date().toISOString(),
    },
    spec: { unschedulable: true },
    status: { conditions: [{ type: 'Ready', status: 'True' }], nodeInfo: { kubeletVersion: 'v1.33.0' } },
  };
  const entry: StoredEntry = { key: 'n1', object, json: JSON.stringify(object) };
  const table = JSON.parse(tableJson(resourceTypeByName('nodes')!, [entry], 7));
  assert.deepEqual(
    table.columnDefinitions.map((c: { name: string }) => c.name),
    ['Name', 'Status', 'Roles', 'Age', 'Version'],
  );
  assert.deepEqual(table.rows[0].cells.slice(0, 3), ['n1', 'Ready,SchedulingDisabled', 'control-plane']);
  assert.equal(table.rows[0].cells[4], 'v1.33.0');
  assert.equal(table.rows[0].object.kind, 'PartialObjectMetadata');
  assert.equal(table.metadata.resourceVersion, '7');
});
