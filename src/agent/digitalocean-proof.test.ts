import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { type DigitalOceanSimulator, startDigitalOceanSimulator } from '../sim/digitalocean/simulator.ts';
import { digitalOceanProof } from './digitalocean-proof.ts';

let sim: DigitalOceanSimulator;
before(async () => {
  sim = await startDigitalOceanSimulator();
});
after(() => sim.close());

test('the proof is the droplet id the metadata service reports, in kops’ scheme', async () => {
  const droplet = sim.addDroplet({});
  const proof = digitalOceanProof({ metadataUrl: sim.metadataUrl(droplet.id) });
  assert.equal(await proof(Buffer.from('{}')), `x-digitalocean-droplet-id ${droplet.id}`);
});

test('a failing metadata service is a retryable error', async () => {
  await assert.rejects(digitalOceanProof({ metadataUrl: sim.metadataUrl(1) })(Buffer.from('{}')), {
    kind: 'unavailable',
  });
  const droplet = sim.addDroplet({});
  sim.fault({ times: 1, operation: 'metadata', status: 500 });
  await assert.rejects(digitalOceanProof({ metadataUrl: sim.metadataUrl(droplet.id) })(Buffer.from('{}')), {
    kind: 'unavailable',
    message: /answered 500/,
  });
});
