import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatAzureProviderID, parseAzureProviderID, parseAzureVmId } from './resource-id.ts';

const sub = '00000000-1111-2222-3333-444444444444';

test('parses scale-set VM and VM ids, ARM keywords in any case, and formats them back canonically', () => {
  const vmss = parseAzureVmId(
    `/subscriptions/${sub}/resourcegroups/kops-rg/providers/microsoft.compute/virtualMachineScaleSets/nodes.c.example.com/VirtualMachines/17`,
  );
  assert.deepEqual(vmss, {
    kind: 'vmss-vm',
    subscriptionId: sub,
    resourceGroup: 'kops-rg',
    name: 'nodes.c.example.com_17',
    scaleSet: 'nodes.c.example.com',
    instanceId: '17',
  });
  assert.equal(
    formatAzureProviderID(vmss),
    `azure:///subscriptions/${sub}/resourceGroups/kops-rg/providers/Microsoft.Compute/virtualMachineScaleSets/nodes.c.example.com/virtualMachines/17`,
  );
  const vm = parseAzureProviderID(
    `azure:///subscriptions/${sub}/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/bastion-1`,
  );
  assert.deepEqual(vm, { kind: 'vm', subscriptionId: sub, resourceGroup: 'rg', name: 'bastion-1' });
});

test('rejects other resource types, path tricks and malformed names with InvalidInputError', () => {
  const base = `/subscriptions/${sub}/resourceGroups/rg/providers/Microsoft.Compute`;
  for (const id of [
    `${base}/disks/d1`,
    `/subscriptions/${sub}/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/n`,
    `${base}/virtualMachineScaleSets/s/virtualMachines/../1`,
    `${base}/virtualMachineScaleSets/s/virtualMachines/1x`,
    `${base}/virtualMachines/a b`,
    `${base}/virtualMachines/`,
    `subscriptions/${sub}/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/x`,
    `/subscriptions/not a sub/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/x`,
    `${base}/virtualMachines/x/extra`,
    // Names ARM refuses (a Linux VM or scale set name has at most 64 characters and does not end
    // with a period or a hyphen): refused here, so that ARM's 400 is only ever about our own request.
    `${base}/virtualMachines/${'a'.repeat(65)}`,
    `${base}/virtualMachines/node.`,
    `${base}/virtualMachineScaleSets/nodes-/virtualMachines/1`,
  ]) {
    assert.throws(() => parseAzureVmId(id), { name: 'InvalidInputError' }, id);
  }
  assert.throws(() => parseAzureProviderID('aws:///us-east-1a/i-1'), { name: 'InvalidInputError' });
});
