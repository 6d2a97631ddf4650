import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { parseAuthorization } from '../bootstrap/authorization.ts';
import { KopsError } from '../errors.ts';
import { type OpenStackSimulator, startOpenStackSimulator } from '../sim/openstack/simulator.ts';
import { openstackProof } from './openstack-proof.ts';

let sim: OpenStackSimulator;
before(async () => {
  sim = await startOpenStackSimulator();
});
after(() => sim.close());

test('the proof is the server uuid from the metadata service, read once', async () => {
  const server = sim.addServer({ name: 'n1' });
  const proof = openstackProof({ metadataUrl: sim.metadataUrl(server.id) });
  const header = await proof(Buffer.from('{}'));
  assert.equal(header, `x-openstack-id ${server.id}`);
  assert.deepEqual(parseAuthorization(header), {
    kind: 'cloud-id',
    scheme: 'x-openstack-id',
    token: server.id,
  });
  sim.clearCalls();
  assert.equal(await proof(Buffer.from('{"other":1}')), header);
  assert.equal(sim.count('metadata'), 0);
});

test('an unreachable, failing or odd metadata service is an unavailable error, not a proof', async () => {
  const unavailable = (err: unknown) => err instanceof KopsError && err.kind === 'unavailable';
  await assert.rejects(
    openstackProof({ metadataUrl: sim.metadataUrl('missing') })(Buffer.alloc(0)),
    unavailable,
  );
  const server = sim.addServer({ name: 'n2' });
  sim.failNext(1, 500, 'metadata');
  await assert.rejects(
    openstackProof({ metadataUrl: sim.metadataUrl(server.id) })(Buffer.alloc(0)),
    unavailable,
  );
  const notJson = (async () => new Response('<html>')) as unknown as typeof fetch;
  await assert.rejects(openstackProof({ fetch: notJson })(Buffer.alloc(0)), /not JSON/);
  const noUuid = (async () => new Response('{"uuid":"a b"}')) as unknown as typeof fetch;
  await assert.rejects(openstackProof({ fetch: noUuid })(Buffer.alloc(0)), /no server uuid/);
  await assert.rejects(
    openstackProof({ metadataUrl: 'http://127.0.0.1:1/x' })(Buffer.alloc(0)),
    /cannot reach/,
  );
});
