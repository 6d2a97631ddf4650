import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError, NotFoundError } from '../../errors.ts';
import { openVfs } from '../../statestore/open.ts';
import type { IdentifyResult } from '../types.ts';
import { InventoryStore } from './inventory.ts';
import { MetalCloudGroups, MetalNodeIdentifier } from './node-identifier.ts';

const inventory = `
hosts:
  - { name: cp-1, instanceGroup: control-plane, addresses: [10.0.0.10, cp-1.dc.example.com] }
  - { name: node-1, instanceGroup: nodes, addresses: [10.0.1.11], providerID: metal://rack4-u12 }
  - { name: node-2, instanceGroup: nodes, addresses: [10.0.1.12] }
`;

async function setup(authority: string, text: string | null = inventory) {
  const vfs = openVfs(`memfs://${authority}/cluster`);
  if (text !== null) await vfs.write('metal/inventory.yaml', text);
  const store = new InventoryStore({ vfs, pollIntervalMs: 0 });
  return { vfs, identifier: new MetalNodeIdentifier(store), groups: new MetalCloudGroups(store) };
}

function errorOf(result: IdentifyResult | undefined): Error {
  assert.ok(result && !result.ok, 'expected no identity');
  return result.error;
}

test('listed hosts are identified by providerID or node name with their inventory group', async () => {
  const { identifier } = await setup('metal-id-ok');
  const results = await identifier.identify(['metal://cp-1', 'metal://rack4-u12', 'node-2']);
  assert.deepEqual(results.get('metal://cp-1'), {
    ok: true,
    identity: {
      providerID: 'metal://cp-1',
      instanceId: 'cp-1',
      instanceGroup: 'control-plane',
      state: 'unknown',
      addresses: [
        { type: 'InternalIP', address: '10.0.0.10' },
        { type: 'InternalDNS', address: 'cp-1.dc.example.com' },
        { type: 'Hostname', address: 'cp-1' },
      ],
    },
  });
  const rack = results.get('metal://rack4-u12');
  assert.ok(rack?.ok && rack.identity.instanceId === 'node-1' && rack.identity.instanceGroup === 'nodes');
  const byName = results.get('node-2');
  assert.ok(byName?.ok && byName.identity.providerID === 'metal://node-2');
});

test('spoof: a host not in the inventory gets no identity', async () => {
  const { identifier } = await setup('metal-id-unknown');
  const results = await identifier.identify(['metal://intruder', 'intruder', 'metal://node-1']);
  for (const id of ['metal://intruder', 'intruder', 'metal://node-1']) {
    const error = errorOf(results.get(id));
    assert.ok(error instanceof NotFoundError);
    assert.match(
      error.message,
      /is not a host of the metal inventory memfs:\/\/metal-id-unknown\/cluster\/metal\/inventory\.yaml/,
    );
  }
});

test('spoof: a corrupt or missing inventory is a clear error and identifies nobody', async () => {
  const corrupt = await setup('metal-id-corrupt', 'hosts:\n  - name: cp-1\n    instanceGroup: [oops');
  const error = errorOf((await corrupt.identifier.identify(['metal://cp-1'])).get('metal://cp-1'));
  assert.ok(error instanceof ConfigError);
  assert.match(error.message, /inventory\.yaml: line \d+, column \d+/);

  const missing = await setup('metal-id-missing', null);
  assert.match(
    errorOf((await missing.identifier.identify(['cp-1'])).get('cp-1')).message,
    /no metal inventory at/,
  );
  await assert.rejects(missing.groups.list('c'), ConfigError);
});

test('an edited inventory takes effect: a removed host loses its identity, a moved one its group', async () => {
  const { vfs, identifier } = await setup('metal-id-edit');
  assert.ok((await identifier.identify(['node-2'])).get('node-2')?.ok);
  await vfs.write(
    'metal/inventory.yaml',
    'hosts: [{ name: node-2, instanceGroup: gpu, addresses: [10.0.1.12] }, { name: cp-1, instanceGroup: control-plane, addresses: [10.0.0.10] }]',
  );
  const results = await identifier.identify(['node-2', 'metal://rack4-u12']);
  const moved = results.get('node-2');
  assert.ok(moved?.ok && moved.identity.instanceGroup === 'gpu');
  assert.ok(errorOf(results.get('metal://rack4-u12')) instanceof NotFoundError);
});

test('cloud groups are the inventory hosts per instance group', async () => {
  const { groups } = await setup('metal-groups');
  assert.deepEqual(
    (await groups.list('any')).map((g) => [
      g.instanceGroup,
      g.cloudName,
      g.targetSize,
      g.members.map((m) => m.providerID),
    ]),
    [
      ['control-plane', 'metal/control-plane', 1, ['metal://cp-1']],
      ['nodes', 'metal/nodes', 2, ['metal://rack4-u12', 'metal://node-2']],
    ],
  );
});
