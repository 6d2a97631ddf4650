import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { after, before, test } from 'node:test';
import { listenOnLoopback } from '../net/loopback.ts';
import { type HetznerSimulator, startHetznerSimulator } from '../sim/hetzner/simulator.ts';
import { hetznerProof } from './hetzner-proof.ts';

let sim: HetznerSimulator;
before(async () => {
  sim = await startHetznerSimulator();
});
after(() => sim.close());

test('the proof is the server id the metadata service reports, in kops’ scheme', async () => {
  const server = sim.addServer({ name: 'nodes-1' });
  const header = await hetznerProof({ metadataUrl: sim.metadataUrl(server.id) })(Buffer.from('{}'));
  assert.equal(header, `x-hetzner-id ${server.id}`);
  assert.equal(sim.count('metadata'), 1);
});

test('a metadata service that fails or is unreachable is retryable; a wrong answer is not', async () => {
  await assert.rejects(hetznerProof({ metadataUrl: sim.metadataUrl(42) })(Buffer.from('{}')), {
    kind: 'unavailable',
    message: /answered 404/,
  });
  const server = sim.addServer({});
  sim.fault({ times: 1, operation: 'metadata', drop: true });
  await assert.rejects(hetznerProof({ metadataUrl: sim.metadataUrl(server.id) })(Buffer.from('{}')), {
    kind: 'unavailable',
  });
});

test('a metadata service answering something that is not a server id is a final error', async () => {
  // Another cloud's metadata service at the same address answers with its own words.
  const other = await listenOnLoopback(createServer((_req, res) => res.end('i-0123456789abcdef0')));
  try {
    await assert.rejects(hetznerProof({ metadataUrl: other.url })(Buffer.from('{}')), {
      kind: 'invalid',
      message: /"i-0123456789abcdef0" is not one/,
    });
  } finally {
    await other.close();
  }
});
