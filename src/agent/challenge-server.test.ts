import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError } from '../errors.ts';
import { holdPort } from '../net/testing.ts';
import { bundlePem, createCa } from '../pki/ca.ts';
import { startChallengeServer } from './challenge-server.ts';

const clusterCaPem = bundlePem(createCa());

test('an address that cannot be bound is a config error naming it and the flag, not a crash', async () => {
  const held = await holdPort();
  try {
    await assert.rejects(
      startChallengeServer({ clusterName: 'c.example.com', clusterCaPem, listen: `127.0.0.1:${held.port}` }),
      (err) =>
        err instanceof ConfigError &&
        err.message.includes(`127.0.0.1:${held.port}`) &&
        err.message.includes('--challenge-listen'),
    );
  } finally {
    await held.release();
  }
});

test('each challenge is new, carries the server certificate, and the endpoint is the bound address', async () => {
  const listener = await startChallengeServer({
    clusterName: 'c.example.com',
    clusterCaPem,
    listen: '127.0.0.1:0',
  });
  try {
    assert.match(listener.endpoint, /^127\.0\.0\.1:[1-9]\d*$/);
    const [a, b] = [listener.createChallenge(), listener.createChallenge()];
    assert.notEqual(a.challengeId, b.challengeId);
    assert.ok(!a.secret.equals(b.secret));
    assert.equal(a.serverCertificatePem, b.serverCertificatePem);
    assert.match(a.serverCertificatePem, /^-----BEGIN CERTIFICATE-----/);
    assert.equal(a.endpoint, listener.endpoint);
  } finally {
    await listener.stop();
  }
});
