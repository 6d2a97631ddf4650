import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { parseAuthorization } from '../bootstrap/authorization.ts';
import { KopsError } from '../errors.ts';
import { type ScalewaySimulator, startScalewaySimulator } from '../sim/scaleway/simulator.ts';
import { scalewayProof } from './scaleway-proof.ts';

let sim: ScalewaySimulator;
before(async () => {
  sim = await startScalewaySimulator();
});
after(() => sim.close());

test('the proof is the server id from the metadata service, read once', async () => {
  const server = sim.addServer({ name: 'n1' });
  const proof = scalewayProof({ metadataUrl: sim.metadataUrl(server.id) });
  const header = await proof(Buffer.from('{}'));
  assert.equal(header, `x-scaleway-instance-server-id ${server.id}`);
  assert.deepEqual(parseAuthorization(header), {
    kind: 'cloud-id',
    scheme: 'x-scaleway-instance-server-id',
    token: server.id,
  });
  sim.clearCalls();
  assert.equal(await proof(Buffer.from('{"again":1}')), header);
  assert.equal(sim.count('metadata'), 0);
});

test('an unreachable, failing or odd metadata service is an unavailable error, not a proof', async () => {
  const unavailable = (err: unknown) => err instanceof KopsError && err.kind === 'unavailable';
  await assert.rejects(
    scalewayProof({ metadataUrl: sim.metadataUrl('missing') })(Buffer.alloc(0)),
    unavailable,
  );
  const server = sim.addServer({ name: 'n2' });
  sim.failNext(1, 500, 'metadata');
  await assert.rejects(
    scalewayProof({ metadataUrl: sim.metadataUrl(server.id) })(Buffer.alloc(0)),
    unavailable,
  );
  const notJson = (async () => new Response('<html>')) as unknown as typeof fetch;
  await assert.rejects(scalewayProof({ fetch: notJson })(Buffer.alloc(0)), /not JSON/);
  const noId = (async () =>
    new Response(
      JSON.stringify({ id: 'x y', location: { zone_id: 'fr-par-1' } }),
    )) as unknown as typeof fetch;
  await assert.rejects(scalewayProof({ fetch: noId })(Buffer.alloc(0)), /no server id/);
  await assert.rejects(
    scalewayProof({ metadataUrl: 'http://127.0.0.1:1/conf' })(Buffer.alloc(0)),
    /cannot reach/,
  );
});
