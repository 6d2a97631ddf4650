import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { test } from 'node:test';
import { GrpcCallbackChallenger } from '../bootstrap/challenge-caller.ts';
import { ConfigError } from '../errors.ts';
import { holdPort } from '../net/testing.ts';
import { bundlePem, createCa } from '../pki/ca.ts';
import { startChallengeServer } from './challenge-server.ts';

const ca = createCa();
const clusterCaPem = bundlePem(ca);

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

test('a challenge made when less than 15 minutes of the certificate remain carries a fresh one, and the node presents it', async () => {
  // A join that has retried for 50 minutes (the default --timeout is an hour): the certificate made
  // when it started has expired, and a callback with it would be a denial, not a fault.
  let now = new Date(Date.now() - 50 * 60_000);
  const listener = await startChallengeServer({
    clusterName: 'c.example.com',
    clusterCaPem,
    listen: '127.0.0.1:0',
    now: () => now,
  });
  try {
    const first = listener.createChallenge();
    now = new Date();
    const second = listener.createChallenge();
    assert.notEqual(second.serverCertificatePem, first.serverCertificatePem);
    const remainingMs = Date.parse(new X509Certificate(second.serverCertificatePem).validTo) - Date.now();
    assert.ok(remainingMs > 44 * 60_000, `the new certificate is valid for ${remainingMs} ms more`);
    // The controller accepts only the certificate the request carried: the node must present the new one.
    const controller = new GrpcCallbackChallenger({ ca, clusterName: 'c.example.com', timeoutMs: 5000 });
    await controller.challenge(listener.endpoint, second);
    // Within its lifetime the certificate is kept: every challenge of a short join carries the same.
    assert.equal(listener.createChallenge().serverCertificatePem, second.serverCertificatePem);
  } finally {
    await listener.stop();
  }
});

test('a clock stepped back after running ahead (chrony’s first sync at boot) gets a fresh certificate, which the controller accepts', async () => {
  // The node started its join with a clock two hours ahead: its first certificate starts in the
  // future on everyone else's clock, for the hour and three quarters it would otherwise be kept.
  let now = new Date(Date.now() + 2 * 3_600_000);
  let monotonic = 0;
  const listener = await startChallengeServer({
    clusterName: 'c.example.com',
    clusterCaPem,
    listen: '127.0.0.1:0',
    now: () => now,
    monotonic: () => monotonic,
  });
  try {
    const first = listener.createChallenge();
    now = new Date();
    monotonic += 1_000;
    const second = listener.createChallenge();
    assert.notEqual(second.serverCertificatePem, first.serverCertificatePem, 'made again after the step');
    assert.ok(Date.parse(new X509Certificate(second.serverCertificatePem).validFrom) <= Date.now());
    const controller = new GrpcCallbackChallenger({ ca, clusterName: 'c.example.com', timeoutMs: 5000 });
    await controller.challenge(listener.endpoint, second);
    // Thirty minutes later by the monotonic clock, whatever the wall clock says, it is replaced again.
    monotonic += 30 * 60_000;
    now = new Date(now.getTime() + 60_000);
    assert.notEqual(listener.createChallenge().serverCertificatePem, second.serverCertificatePem);
  } finally {
    await listener.stop();
  }
});
