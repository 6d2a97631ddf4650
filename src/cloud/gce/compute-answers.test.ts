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

async function computeAgainst(script: (r: ScriptedRequest) => ScriptedAnswer, project = 'p') {
  const api = await startScriptedApi(script);
  closers.push(() => api.close());
  const auth = new OAuth2Client();
  auth.setCredentials({ access_token: 'token', expiry_date: Date.now() + 3_600_000 });
  return { api, compute: new ComputeClient({ project, auth, endpoint: api.url, retries: 0 }) };
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

/**
 * An aggregatedList page as Compute Engine answers it (compute v1 discovery, InstanceAggregatedList /
 * InstanceGroupManagerAggregatedList: `items` keyed by scope, each scope either the resource list or
 * a `warning` `{code: "NO_RESULTS_ON_PAGE", message, data: [{key: "scope", value}]}` replacing it).
 * instanceGroupManagers.aggregatedList lists regional MIGs too, under `regions/<region>` with `region`
 * and no `zone` (gcloud's `instance-groups managed list` lists zones and regions with it alone:
 * googlecloudsdk surface/compute/instance_groups/managed/list.py, aggregation_service=instanceGroupManagers).
 */
function emptyScope(scope: string) {
  return {
    warning: {
      code: 'NO_RESULTS_ON_PAGE',
      message: `There are no results for scope '${scope}' on this page.`,
      data: [{ key: 'scope', value: scope }],
    },
  };
}

test('compute: real-shaped aggregated lists: scopes with a warning instead of a list are empty, not malformed', async () => {
  const { compute } = await computeAgainst((r) => ({
    body: {
      kind: 'compute#instanceAggregatedList',
      id: 'projects/p/aggregated/instances',
      items: {
        'zones/us-east4-a': { instances: [instance('a')] },
        'zones/us-east4-b': emptyScope('zones/us-east4-b'),
        'zones/us-east4-c': { instances: [instance('c', 'us-east4-c')] },
      },
      selfLink: `https://www.googleapis.com/compute/v1${r.path}`,
    },
  }));
  assert.deepEqual(
    (await compute.aggregatedListInstances()).map((i) => i.name),
    ['a', 'c'],
  );
});

test('compute: an aggregated list that says a scope was unreachable (unreachables, or a scope warning UNREACHABLE) is a fault, never a listing without that zone', async () => {
  // compute v1 discovery: aggregated lists carry `unreachables` (with returnPartialSuccess) and the
  // warning code UNREACHABLE ("A given scope cannot be reached"). The controller never asks for partial
  // success, but an instance missing from a partial listing would read as not ours: a denial.
  for (const body of [
    {
      kind: 'compute#instanceAggregatedList',
      items: { 'zones/us-east4-a': { instances: [instance('a')] } },
      unreachables: ['zones/us-east4-b'],
    },
    {
      kind: 'compute#instanceAggregatedList',
      items: {
        'zones/us-east4-a': { instances: [instance('a')] },
        'zones/us-east4-b': {
          warning: {
            code: 'UNREACHABLE',
            message: 'Scope zones/us-east4-b cannot be reached.',
            data: [{ key: 'scope', value: 'zones/us-east4-b' }],
          },
        },
      },
    },
  ]) {
    const { compute } = await computeAgainst(() => ({ body }));
    await assert.rejects(compute.aggregatedListInstances(), (err: KopsError) => {
      assert.equal(err.kind, 'unavailable');
      assert.match(err.message, /us-east4-b/);
      return true;
    });
  }
});

test('cloud groups: a regional MIG in the aggregated MIG list (regions/<r>, no zone) is left out, as kops, and does not fail the listing', async () => {
  const base = 'https://www.googleapis.com/compute/v1/projects/kops-prod';
  const template = `${base}/global/instanceTemplates/nodes-tpl`;
  const zonal = {
    kind: 'compute#instanceGroupManager',
    id: '11',
    name: 'a-nodes-us-east4-a',
    zone: `${base}/zones/us-east4-a`,
    instanceTemplate: template,
    versions: [{ instanceTemplate: template }],
    targetSize: 1,
    selfLink: `${base}/zones/us-east4-a/instanceGroupManagers/a-nodes-us-east4-a`,
  };
  // Made by hand from the same kops template; kops creates and lists zonal MIGs only.
  const regional = {
    kind: 'compute#instanceGroupManager',
    id: '12',
    name: 'nodes-regional',
    region: `${base}/regions/us-east4`,
    distributionPolicy: { zones: [{ zone: `${base}/zones/us-east4-a` }] },
    instanceTemplate: template,
    versions: [{ instanceTemplate: template }],
    targetSize: 2,
    selfLink: `${base}/regions/us-east4/instanceGroupManagers/nodes-regional`,
  };
  const paths: string[] = [];
  const { compute } = await computeAgainst((r) => {
    paths.push(`${r.method} ${r.path}`);
    if (r.path === '/projects/kops-prod/aggregated/instanceGroupManagers') {
      return {
        body: {
          kind: 'compute#instanceGroupManagerAggregatedList',
          items: {
            'regions/us-east4': { instanceGroupManagers: [regional] },
            'zones/us-east4-a': { instanceGroupManagers: [zonal] },
            'zones/us-east4-b': emptyScope('zones/us-east4-b'),
          },
        },
      };
    }
    if (r.path === '/projects/kops-prod/global/instanceTemplates/nodes-tpl') {
      return {
        body: {
          kind: 'compute#instanceTemplate',
          id: '21',
          name: 'nodes-tpl',
          properties: {
            metadata: {
              items: [
                { key: 'cluster-name', value: 'prod.example.com' },
                { key: 'kops-k8s-io-instance-group-name', value: 'nodes' },
              ],
            },
          },
        },
      };
    }
    if (
      r.path ===
      '/projects/kops-prod/zones/us-east4-a/instanceGroupManagers/a-nodes-us-east4-a/listManagedInstances'
    ) {
      return {
        body: {
          managedInstances: [
            {
              instance: `${base}/zones/us-east4-a/instances/a-nodes-us-east4-a-x1`,
              id: '31',
              instanceStatus: 'RUNNING',
              currentAction: 'NONE',
              version: { instanceTemplate: template },
            },
          ],
        },
      };
    }
    const message = `The resource '${r.path}' was not found`;
    return {
      status: 404,
      body: { error: { code: 404, message, errors: [{ message, domain: 'global', reason: 'notFound' }] } },
    };
  }, 'kops-prod');
  const groups = await new GceCloudGroups({ compute }).list('prod.example.com');
  assert.deepEqual(
    groups.map((g) => [g.instanceGroup, g.cloudName, g.targetSize, g.members.map((m) => m.providerID)]),
    [['nodes', 'a-nodes-us-east4-a', 1, ['gce://kops-prod/us-east4-a/a-nodes-us-east4-a-x1']]],
  );
  assert.ok(!paths.some((p) => p.includes('nodes-regional')), paths.join('\n'));
});

test("compute: a 400 to a listing (its filter is the controller's own, e.g. one the API finds too complex) is a fault, not a verdict on the instances asked for; a 400 to a read by name stays the node's", async () => {
  const refusal = {
    status: 400,
    body: {
      error: {
        code: 400,
        message: 'Invalid value for field filter: the filter expression is too complex.',
        errors: [{ reason: 'invalid', domain: 'global', message: 'the filter expression is too complex.' }],
      },
    },
  };
  const { compute } = await computeAgainst(() => refusal);
  for (const listing of [
    () => compute.listInstances('us-east4-a', '(name = "a") OR (name = "b")'),
    () => compute.aggregatedListInstances('(name = "a") OR (name = "b")'),
  ]) {
    await assert.rejects(listing(), (err: KopsError) => {
      assert.equal(err.kind, 'unavailable');
      return true;
    });
  }
  await assert.rejects(compute.getInstance('us-east4-a', 'a'), (err: KopsError) => err.kind === 'invalid');
});

test("compute: a 400 or 404 without Google's error body (an endpoint that is not the API's, a proxy's page) is a fault, never a verdict on the instance", async () => {
  for (const status of [400, 404]) {
    const { compute } = await computeAgainst(() => ({ status, body: '<html>Not Found</html>', raw: true }));
    await assert.rejects(compute.getInstance('us-east4-a', 'a'), (err: KopsError) => {
      assert.equal(err.kind, 'unavailable', `${status}: ${err.message}`);
      return true;
    });
  }
  const { compute } = await computeAgainst(() => ({
    status: 404,
    body: {
      error: { code: 404, message: "The resource 'a' was not found", errors: [{ reason: 'notFound' }] },
    },
  }));
  await assert.rejects(compute.getInstance('us-east4-a', 'a'), (err: KopsError) => err.kind === 'not-found');
});
