/**
 * The Compute Engine API answering wrongly, over real HTTP (a scripted loopback API, or the
 * simulator): page tokens that repeat or cycle, an instance read by name that answers another
 * instance, a 200 that is not JSON, and an instance group name kops never writes.
 */
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { OAuth2Client } from 'google-auth-library';
import { Registry } from 'prom-client';
import type { KopsError } from '../../errors.ts';
import { simulatorCompute } from '../../sim/gce/clients.ts';
import { startGceSimulator } from '../../sim/gce/simulator.ts';
import { cloudRequests } from '../../testing/cloud-calls.ts';
import { cloudCallMetrics } from '../metrics.ts';
import { type ScriptedAnswer, type ScriptedRequest, startScriptedApi } from '../scripted-api.test-support.ts';
import { GceCloudGroups } from './cloud-groups.ts';
import { ComputeClient } from './compute.ts';
import { GceNodeIdentifier } from './node-identifier.ts';

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

test('compute: a 200 that is not JSON is a fault counted as an error, not ok, never an empty list', async () => {
  const api = await startScriptedApi(() => ({ body: '<html>proxy</html>', raw: true }));
  closers.push(() => api.close());
  const auth = new OAuth2Client();
  auth.setCredentials({ access_token: 'token', expiry_date: Date.now() + 3_600_000 });
  const registry = new Registry();
  const compute = new ComputeClient({
    project: 'p',
    auth,
    endpoint: api.url,
    retries: 0,
    cloudCalls: cloudCallMetrics(registry),
  });
  await assert.rejects(
    compute.listInstances('us-east4-a'),
    (err: KopsError) => err.kind === 'unavailable' && err.reasonCode === 'malformed-answer',
  );
  const counted = await cloudRequests(registry);
  assert.equal(counted['gce instances.list ok'] ?? 0, 0, JSON.stringify(counted));
  assert.equal(counted['gce instances.list error'], 1, JSON.stringify(counted));
});

test('compute: an instance group name kops never writes is refused with a reason, and no cloud group', async () => {
  const sim = await startGceSimulator({ project: 'kops-prod' });
  closers.push(() => sim.close());
  const cluster = 'prod.example.com';
  const [node] = sim.world.seedInstanceGroup({
    zone: 'us-central1-a',
    instanceGroup: '../../config',
    mig: 'a-bad',
    template: 'bad-tpl',
    count: 1,
    clusterName: cluster,
  });
  const pid = `gce://kops-prod/us-central1-a/${node?.name}`;
  const identifier = new GceNodeIdentifier({
    compute: simulatorCompute(sim),
    clusterName: cluster,
    coalesceWindowMs: 1,
  });
  const result = (await identifier.identify([pid])).get(pid);
  assert.ok(result && !result.ok, JSON.stringify(result));
  assert.equal((result.error as KopsError).kind, 'forbidden');
  assert.equal((result.error as KopsError).reasonCode, 'invalid-instance-group');
  assert.deepEqual(await new GceCloudGroups({ compute: simulatorCompute(sim) }).list(cluster), []);
});
