import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { type LinodeSimulator, startLinodeSimulator } from '../sim/linode/simulator.ts';
import { linodeMetadataValue, linodeProof } from './linode-proof.ts';

let sim: LinodeSimulator;
before(async () => {
  sim = await startLinodeSimulator();
});
after(() => sim.close());

test('the proof is the instance id from the metadata service, after its token dance', async () => {
  const instance = sim.addInstance({ label: 'nodes-1' });
  const header = await linodeProof({ metadataUrl: sim.metadataUrl(instance.id) })(Buffer.from('{}'));
  assert.equal(header, `x-linode-instance-id ${instance.id}`);
  assert.equal(sim.count('metadata.token'), 1);
  assert.equal(sim.count('metadata.instance'), 1);
});

test('the metadata service failing is retryable', async () => {
  const instance = sim.addInstance({});
  sim.fault({ times: 1, operation: 'metadata.token', status: 500 });
  await assert.rejects(linodeProof({ metadataUrl: sim.metadataUrl(instance.id) })(Buffer.from('{}')), {
    kind: 'unavailable',
  });
  sim.fault({ times: 1, operation: 'metadata.instance', drop: true });
  await assert.rejects(linodeProof({ metadataUrl: sim.metadataUrl(instance.id) })(Buffer.from('{}')), {
    kind: 'unavailable',
  });
});

test('the metadata text is read as kops reads it', () => {
  assert.equal(linodeMetadataValue('id: 42\nlabel: a:b\n', 'label'), 'a:b');
  assert.equal(linodeMetadataValue('host_uuid: x\nid: 42', 'id'), '42');
  assert.equal(linodeMetadataValue('label: x', 'id'), undefined);
});
