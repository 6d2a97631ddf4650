/**
 * attack: a TPM proof's zone and instance are read before its signature is checked and placed in the
 * compute API's path. `..` (or `.`) is not escaped by encodeURIComponent and the URL parser resolves
 * it, so the request would reach another path of the API, which Google's front end answers with its
 * HTML 404 page, not Google's JSON error; and such a 404 is a fault (`not-the-api`), so anyone,
 * without any credential, would turn their own denial into a 503 counted as the compute API failing.
 * Names that are none are refused before the call.
 *
 * The loopback API below plays Google: its own JSON 404 for an instance it does not know, and the
 * front end's HTML page for a path the API does not serve.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, test } from 'node:test';
import { OAuth2Client } from 'google-auth-library';
import { ComputeClient } from '../../cloud/gce/compute.ts';
import { type ScriptedRequest, startScriptedApi } from '../../cloud/scripted-api.test-support.ts';
import { InvalidInputError, NotFoundError } from '../../errors.ts';
import { testRequest } from '../../testing/bootstrap-request.ts';
import { MemoryReplayGuard } from '../replay-guard.ts';
import type { PolicyContext } from '../types.ts';
import { gcePolicy, kopsGceTpmAudience } from './gce.ts';

const project = 'p';
const paths: string[] = [];
const closers: Array<() => Promise<void>> = [];
after(async () => {
  for (const close of closers) await close();
});

const served = /^\/projects\/p\/zones\/[a-z0-9-]+\/instances\/[a-z0-9-]+\/getShieldedInstanceIdentity$/;
function google(r: ScriptedRequest) {
  paths.push(r.path);
  if (served.test(r.path)) {
    return {
      status: 404,
      body: {
        error: { code: 404, message: "The resource 'x' was not found", errors: [{ reason: 'notFound' }] },
      },
    };
  }
  return { status: 404, raw: true, body: '<!DOCTYPE html><title>Error 404 (Not Found)!!1</title>' };
}

function unsignedTpmProof(zone: string, instance: string, body: string) {
  const data = Buffer.from(
    JSON.stringify({
      gcpProjectID: project,
      zone,
      instance,
      requestHash: createHash('sha256').update(body).digest('base64'),
      timestamp: Math.floor(Date.now() / 1000),
      audience: kopsGceTpmAudience,
    }),
  );
  const token = Buffer.from(
    JSON.stringify({ data: data.toString('base64'), signature: Buffer.alloc(256).toString('base64') }),
  ).toString('base64');
  return testRequest({ body: Buffer.from(body), proof: { kind: 'gce-tpm', token } });
}

test('attack: an unsigned TPM proof naming instance ".." or zone ".." is denied, never a compute fault', async () => {
  const api = await startScriptedApi(google);
  closers.push(() => api.close());
  const auth = new OAuth2Client();
  auth.setCredentials({ access_token: 'token', expiry_date: Date.now() + 3_600_000 });
  const compute = new ComputeClient({ project, auth, endpoint: api.url, retries: 0 });
  const policy = gcePolicy({
    project,
    identifier: {
      identify: async () => {
        throw new Error('not reached');
      },
    } as never,
    compute,
    replayGuard: new MemoryReplayGuard(),
  });
  const now: PolicyContext = { now: () => new Date() };
  // The control: an unknown instance is the API's own 404, a denial.
  const unknown = await policy.evaluate(unsignedTpmProof('us-east1-b', 'nobody', '{"a":1}'), now);
  assert.equal(unknown.verdict, 'deny');
  for (const [zone, instance] of [
    ['us-east1-b', '..'],
    ['..', 'x'],
    ['us-east1-b', '.'],
  ] as const) {
    const outcome = await policy
      .evaluate(unsignedTpmProof(zone, instance, `{"z":"${zone}${instance}"}`), now)
      .then(
        (d) => d.verdict,
        (err: Error) => `thrown: ${err.message}`,
      );
    assert.equal(
      outcome,
      'deny',
      `zone ${zone} instance ${instance}: ${outcome} (paths asked: ${paths.join(', ')})`,
    );
  }
});

// Each of the two guards on its own: the policy's name check, and the compute client's path segments.
test('ComputeClient alone: a path segment that is none (., .., empty) is refused before any request', async () => {
  const asked: string[] = [];
  const api = await startScriptedApi((r: ScriptedRequest) => {
    asked.push(r.path);
    return { status: 404, body: { error: { code: 404, message: 'not found' } } };
  });
  closers.push(() => api.close());
  const auth = new OAuth2Client();
  auth.setCredentials({ access_token: 'token', expiry_date: Date.now() + 3_600_000 });
  const compute = new ComputeClient({ project: 'p', auth, endpoint: api.url, retries: 0 });
  for (const [zone, name] of [
    ['us-east1-b', '..'],
    ['..', 'x'],
    ['us-east1-b', '.'],
    ['us-east1-b', ''],
  ] as const) {
    await assert.rejects(
      (async () => compute.getShieldedInstanceIdentity(zone, name))(),
      InvalidInputError,
      `${zone}/${name}`,
    );
    await assert.rejects(compute.getInstance(zone, name), InvalidInputError, `${zone}/${name}`);
  }
  assert.deepEqual(asked, []);
});

test('the TPM policy alone: a zone or instance that is not a GCE name is denied without asking the compute API', async () => {
  let calls = 0;
  const compute = {
    project: 'p',
    getShieldedInstanceIdentity: async () => {
      calls++;
      throw new NotFoundError('no such instance');
    },
    getInstance: async () => {
      calls++;
      throw new NotFoundError('no such instance');
    },
  };
  const policy = gcePolicy({
    project: 'p',
    identifier: {
      identify: async () => {
        throw new Error('not reached');
      },
    } as never,
    compute: compute as never,
    replayGuard: new MemoryReplayGuard(),
  });
  const now: PolicyContext = { now: () => new Date() };
  for (const [zone, instance] of [
    ['us-east1-b', '..'],
    ['..', 'x'],
    ['US-EAST1-B', 'x'],
    ['us-east1-b', 'A_b'],
    ['us-east1-b/../x', 'y'],
  ] as const) {
    const decision = await policy.evaluate(
      unsignedTpmProof(zone, instance, `{"z":"${zone}${instance}"}`),
      now,
    );
    assert.equal(decision.verdict, 'deny', `${zone} ${instance}`);
  }
  assert.equal(calls, 0, 'the compute API was asked about a name that is none');
});
