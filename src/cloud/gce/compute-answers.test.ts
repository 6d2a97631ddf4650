/**
 * The Compute Engine API answering wrongly, over real HTTP (a scripted loopback API): page tokens
 * that repeat or cycle, and an instance read by name that answers another instance.
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { OAuth2Client } from 'google-auth-library';
import type { KopsError } from '../../errors.ts';
import { type ScriptedAnswer, type ScriptedRequest, startScriptedApi } from '../scripted-api.test-support.ts';
import { ComputeClient } from './compute.ts';

const closers: Array<() => Promise<void>> = [];
after(async () => {
  for (const close of closers) await close();
});

async function computeAgainst(script: (r: ScriptedRequest) => ScriptedAnswer) {
  const api = await startScriptedApi(script);
  closers.push(() => api.close());
  const auth = new OAuth2Client();
  auth.setCredentials({ access_token: 'token', expiry_date: Date.now() + 3_600_000 });
  return { api, compute: new ComputeClient({ project: 'p', auth, endpoint: api.url, retries: 0 }) };
}

function instance(name: string, zone = 'us-east4-a') {
  return {
    id: '1',
    name,
    zone: `https://www.googleapis.com/compute/v1/projects/p/zones/${zone}`,
    status: 'RUNNING',
  };
}

test('compute: a page token that repeats ends the listing with a fault, not a loop', async () => {
  const { api, compute } = await computeAgainst((r) => ({
    body: { items: [instance('a')], ...(r.served < 3_000 ? { nextPageToken: 'same' } : {}) },
  }));
  await assert.rejects(compute.listInstances('us-east4-a'), (err: KopsError) => err.kind === 'unavailable');
  assert.ok(api.served <= 3, `${api.served} pages read`);
});

test('compute: page tokens that cycle end the listing with a fault, not a loop', async () => {
  const { api, compute } = await computeAgainst((r) => ({
    body: {
      items: [instance('a')],
      ...(r.served < 3_000 ? { nextPageToken: r.query.get('pageToken') === 'A' ? 'B' : 'A' } : {}),
    },
  }));
  await assert.rejects(compute.listInstances('us-east4-a'), (err: KopsError) => err.kind === 'unavailable');
  assert.ok(api.served <= 4, `${api.served} pages read`);
});

test('compute: an instance read by name that answers another instance is a fault, not that instance', async () => {
  const { compute } = await computeAgainst(() => ({ body: instance('other') }));
  await assert.rejects(
    compute.getInstance('us-east4-a', 'asked'),
    (err: KopsError) => err.kind === 'unavailable',
  );
  const { compute: wrongZone } = await computeAgainst(() => ({ body: instance('asked', 'us-east4-b') }));
  await assert.rejects(
    wrongZone.getInstance('us-east4-a', 'asked'),
    (err: KopsError) => err.kind === 'unavailable',
  );
});
