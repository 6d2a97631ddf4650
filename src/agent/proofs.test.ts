import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { type GceSimulator, startGceSimulator } from '../sim/gce/simulator.ts';
import { gceIdentityProof, noProof, tokenProof, validateBootstrapToken } from './proofs.ts';

const body = Buffer.from('{}');

describe('tokenProof', () => {
  test('sends the kubeadm token as a bearer token', async () => {
    assert.equal(await tokenProof('abcdef.0123456789abcdef')(body), 'Bearer abcdef.0123456789abcdef');
    assert.equal(await noProof(body), undefined);
  });

  test('a malformed token is refused without echoing it', () => {
    assert.throws(
      () => validateBootstrapToken('ABCDEF.secret-value-here'),
      (err: Error) => !err.message.includes('secret-value-here') && /kubeadm format/.test(err.message),
    );
  });
});

describe('gceIdentityProof against the GCE simulator', () => {
  let sim: GceSimulator;
  let instance = '';
  before(async () => {
    sim = await startGceSimulator({ project: 'sim-p' });
    instance = sim.seedInstance({ zone: 'us-east1-b', name: 'nodes-a1' }).name;
  });
  after(() => sim.close());

  test('fetches a full-format identity token for the bootstrap server audience', async () => {
    const proof = gceIdentityProof({
      audience: 'https://kops-controller.internal.c.example.com:3988',
      identityUrl: `${sim.metadataUri}/instance/service-accounts/default/identity?instance=us-east1-b/${instance}`,
    });
    const header = await proof(body);
    assert.match(header ?? '', /^x-gce-identity [\w-]+\.[\w-]+\.[\w-]+$/);
    const payload = JSON.parse(Buffer.from((header ?? '').split('.')[1] as string, 'base64url').toString());
    assert.equal(payload.aud, 'https://kops-controller.internal.c.example.com:3988');
    assert.equal(payload.google.compute_engine.instance_name, instance);
  });

  test('a metadata server error is a retryable unavailable error', async () => {
    const proof = gceIdentityProof({
      audience: 'https://x.example',
      identityUrl: `${sim.metadataUri}/instance/service-accounts/default/identity`,
    });
    await assert.rejects(proof(body), (err: { kind?: string; message: string }) => {
      assert.equal(err.kind, 'unavailable');
      assert.match(err.message, /answered 400 for the identity token/);
      return true;
    });
  });
});
