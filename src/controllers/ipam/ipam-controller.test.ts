import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Registry } from 'prom-client';
import { type AwsClients, createAwsClients } from '../../cloud/aws/clients.ts';
import { AwsNodeIdentifier } from '../../cloud/aws/identify.ts';
import { cloudCallMetrics } from '../../cloud/metrics.ts';
import { nodeInformer } from '../../kube/shared-informer.ts';
import { type KubeObject, type SimApiServer, startApiServer } from '../../sim/apiserver/index.ts';
import { awsProviderID, simInstanceId, simIpv6Prefix } from '../../sim/aws/scenario.ts';
import { type AwsSimulator, startAwsSimulator } from '../../sim/aws/server.ts';
import type { SimInstanceInput } from '../../sim/aws/world.ts';
import { cloudRequests } from '../../testing/cloud-calls.ts';
import { msToStop } from '../../testing/leadership.ts';
import { IpamController, type IpamControllerOptions, podCidrConflictReason } from './ipam-controller.ts';
import { AwsPodCidrSource } from './sources.ts';

const clusterName = 'ipv6.example.com';
const zone = 'us-east-1a';
let api: SimApiServer;
let aws: AwsSimulator;
let closeClients: () => void;
let ec2: AwsClients['ec2'];
const registry = new Registry();
const stop = new AbortController();
let running: Promise<void>;
let nextId = 1;

before(async () => {
  api = await startApiServer();
  aws = await startAwsSimulator({ throttling: false });
  const clients = await createAwsClients({
    region: aws.region,
    endpoint: aws.endpoint,
    credentials: aws.credentials,
    // Two attempts: a failing EC2 fails the reconcile quickly, and the work queue's backoff retries it.
    maxAttempts: 2,
    cloudCalls: cloudCallMetrics(registry),
  });
  closeClients = clients.destroy;
  ec2 = clients.ec2;
  const controller = new IpamController({
    kubeConfig: api.kubeConfig(),
    nodes: nodeInformer(api.kubeConfig()),
    source: awsSource(),
    recheckMs: 60_000,
    waitRetryMs: 100,
    baseRetryDelayMs: 20,
    maxRetryDelayMs: 200,
    registry,
  });
  running = controller.start(stop.signal);
});

after(async () => {
  stop.abort();
  await running;
  closeClients();
  await Promise.all([api.close(), aws.close()]);
});

/** The controller's source of pod ranges: EC2 through the simulator, as the AWS provider builds it. */
function awsSource(): AwsPodCidrSource {
  return new AwsPodCidrSource(
    new AwsNodeIdentifier({
      ec2,
      clusterName,
      batchWindowMs: 5,
      // These tests are about EC2's answers and its throttle; the identifier's own call budget
      // (which would let EC2's bucket refill while a lookup waits) is tested with the identifier.
      callBudget: { burst: 1_000, perSecond: 1_000 },
    }),
  );
}

/** A running instance of the cluster with one ENI and the given prefixes (default: its own /80). */
function instance(overrides: Partial<SimInstanceInput> = {}): SimInstanceInput {
  const n = nextId++;
  const input: SimInstanceInput = {
    id: simInstanceId(n),
    zone,
    cluster: clusterName,
    instanceGroup: 'nodes',
    ipv6Prefixes: [simIpv6Prefix(n)],
    ...overrides,
  };
  aws.ec2.addInstances([input]);
  return input;
}

/** Registers the Node of an instance, as its kubelet does. */
function register(input: SimInstanceInput, spec: Record<string, unknown> = {}, name = input.id): string {
  api.store.create({
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name },
    spec: { providerID: awsProviderID(input), ...spec },
  } as KubeObject);
  return name;
}

function specOf(name: string): { podCIDR?: string; podCIDRs?: string[] } {
  return (api.store.get('nodes', undefined, name)?.['spec'] ?? {}) as {
    podCIDR?: string;
    podCIDRs?: string[];
  };
}

function warnings(name: string): string[] {
  return api.store
    .list('events', 'default')
    .filter(
      (e) =>
        (e['involvedObject'] as { name?: string }).name === name && e['reason'] === podCidrConflictReason,
    )
    .map((e) => String(e['message']));
}

async function metric(name: string, labels: Record<string, string> = {}): Promise<number> {
  const values = (await registry.getSingleMetric(name)?.get())?.values ?? [];
  return values
    .filter((v) => Object.entries(labels).every(([k, value]) => v.labels[k] === value))
    .reduce((sum, v) => sum + v.value, 0);
}

/**
 * A controller over an API server of its own, so that the file's running controller does not act on
 * its Nodes; `close` stops its Node watch and the API server.
 */
async function isolatedController(options: Partial<IpamControllerOptions> = {}) {
  const api = await startApiServer();
  const registry = new Registry();
  const nodes = nodeInformer(api.kubeConfig());
  const controller = new IpamController({
    kubeConfig: api.kubeConfig(),
    nodes,
    source: awsSource(),
    registry,
    ...options,
  });
  const inConflict = async () =>
    (await registry.getSingleMetric('ipam_controller_nodes_in_conflict')?.get())?.values[0]?.value ?? 0;
  const close = async () => {
    await nodes.close();
    await api.close();
  };
  return { api, registry, nodes, controller, inConflict, close };
}

/** Whether an IPAM reconcile is in progress (the work queue's longest-running gauge of `registry`). */
async function reconcileRunning(registry: Registry): Promise<boolean> {
  const running = await registry.getSingleMetric('workqueue_longest_running_processor_seconds')?.get();
  return (running?.values.find((v) => v.labels['name'] === 'ipam')?.value ?? 0) > 0;
}

async function eventually(what: string, check: () => boolean | Promise<boolean>): Promise<void> {
  for (let i = 0; i < 1000; i++) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  assert.fail(`timed out waiting until ${what}`);
}

test('a new node gets the IPv6 prefix delegated to its ENI as podCIDRs (and podCIDR, as kops)', async () => {
  const node = register(instance());
  const prefix = simIpv6Prefix(nextId - 1);
  await eventually('the node has podCIDRs', () => specOf(node).podCIDRs !== undefined);
  assert.deepEqual(specOf(node), {
    providerID: awsProviderID({ id: node, zone }),
    podCIDR: prefix,
    podCIDRs: [prefix],
  });
});

test('batched: nodes registering together share DescribeInstances calls', async () => {
  const inputs = Array.from({ length: 40 }, () => instance());
  aws.calls.reset();
  for (const input of inputs) register(input);
  await eventually('every node has podCIDRs', () => inputs.every((i) => specOf(i.id).podCIDRs !== undefined));
  for (const [i, input] of inputs.entries())
    assert.deepEqual(specOf(input.id).podCIDRs, [input.ipv6Prefixes?.[0]], `node ${i}`);
  assert.ok(
    aws.calls.count('DescribeInstances') <= 8,
    `${aws.calls.count('DescribeInstances')} calls for 40 nodes`,
  );
});

test('never overwritten: a node whose podCIDRs differ from the cloud keeps them; one Event, counter and gauge', async () => {
  const before = await metric('ipam_controller_conflicts_total', { reason: 'existing-differs' });
  const node = register(instance(), {
    podCIDR: '2001:db8:ffff:1:1::/80',
    podCIDRs: ['2001:db8:ffff:1:1::/80'],
  });
  await eventually('the conflict is reported', () => warnings(node).length > 0);
  assert.match(
    warnings(node)[0] ?? '',
    /has podCIDRs 2001:db8:ffff:1:1::\/80, but the cloud routes 2001:db8:0:1:[0-9a-f]+::\/80/,
  );
  assert.deepEqual(specOf(node).podCIDRs, ['2001:db8:ffff:1:1::/80']);
  assert.equal(await metric('ipam_controller_conflicts_total', { reason: 'existing-differs' }), before + 1);
  assert.ok((await metric('ipam_controller_nodes_in_conflict')) >= 1);
});

test('conflict: a range another node holds is not given to a second node; freed by the holder, it is assigned', async () => {
  // The instance's prefix was first delegated to an instance since terminated, whose Node is still there.
  const reused = instance();
  const prefix = reused.ipv6Prefixes?.[0] as string;
  const stale = register(
    instance({ ipv6Prefixes: [] }),
    { podCIDR: prefix, podCIDRs: [prefix] },
    'stale-node',
  );
  const node = register(reused);
  await eventually('the conflict is reported', () => warnings(node).length > 0);
  assert.match(
    warnings(node)[0] ?? '',
    new RegExp(`not assigning podCIDRs to node ${node}: .* is held by node ${stale}`),
  );
  assert.equal(specOf(node).podCIDRs, undefined);
  assert.ok((await metric('ipam_controller_conflicts_total', { reason: 'range-in-use' })) >= 1);
  api.store.delete('nodes', undefined, stale);
  await eventually('the freed range is assigned', () => specOf(node).podCIDRs !== undefined);
  assert.deepEqual(specOf(node).podCIDRs, [prefix]);
});

test('a node whose providerID names an instance that is not its own gets nothing, even registered first', async () => {
  const shared = instance();
  const impostor = register(shared, {}, 'impostor');
  await eventually('the impostor is reported', () => warnings(impostor).length > 0);
  assert.match(warnings(impostor)[0] ?? '', /node impostor is not a name of instance/);
  assert.ok((await metric('ipam_controller_conflicts_total', { reason: 'not-its-instance' })) >= 1);
  const real = register(shared);
  await eventually('the real node has podCIDRs', () => specOf(real).podCIDRs !== undefined);
  assert.deepEqual(specOf(real).podCIDRs, shared.ipv6Prefixes);
  assert.equal(specOf(impostor).podCIDRs, undefined);
});

test('two nodes of one instance (both named as the instance, e.g. by its id and its DNS name): only one gets its range', async () => {
  const shared = instance();
  const byId = register(shared);
  const byDns = register(shared, {}, aws.ec2.instance(shared.id)?.privateDnsName);
  await eventually('one node has the range and the other is reported', () => {
    const assigned = [byId, byDns].filter((n) => specOf(n).podCIDRs !== undefined);
    const reported = [byId, byDns].filter((n) => warnings(n).length > 0);
    return assigned.length === 1 && reported.length === 1 && assigned[0] !== reported[0];
  });
});

test('an instance with two ENIs is never guessed between: reported, nothing assigned', async () => {
  const node = register(
    instance({ secondaryNetworkInterfaces: [{ ipv6Prefixes: ['2001:db8:eeee:1::/80'] }] }),
  );
  await eventually('the conflict is reported', () => warnings(node).length > 0);
  assert.match(warnings(node)[0] ?? '', /2 network interfaces/);
  assert.equal(specOf(node).podCIDRs, undefined);
});

test("another cluster's instance gets nothing and is not a conflict (the NodeController reports it)", async () => {
  const rejectedBefore = await metric('ipam_controller_reconciles_total', { result: 'rejected' });
  const node = register(instance({ cluster: 'other.example.com' }));
  await eventually(
    'the node is refused',
    async () => (await metric('ipam_controller_reconciles_total', { result: 'rejected' })) > rejectedBefore,
  );
  assert.equal(specOf(node).podCIDRs, undefined);
  assert.deepEqual(warnings(node), []);
});

test('an instance whose prefix is delegated after its node registered gets it once EC2 shows it', async () => {
  const input = instance({ ipv6Prefixes: [] });
  const node = register(input);
  await eventually(
    'the node is waiting',
    async () => (await metric('ipam_controller_reconciles_total', { result: 'waiting' })) > 0,
  );
  const prefix = simIpv6Prefix(9_000);
  (aws.ec2.instance(input.id) as { ipv6Prefixes?: string[] }).ipv6Prefixes = [prefix];
  await eventually('the node has podCIDRs', () => specOf(node).podCIDRs !== undefined);
  assert.deepEqual(specOf(node).podCIDRs, [prefix]);
});

test('a node whose instance never gets a range is looked at less and less often', async () => {
  const before = await metric('ipam_controller_reconciles_total', { result: 'waiting' });
  register(instance({ ipv6Prefixes: [] }));
  await eventually(
    'the node is waiting',
    async () => (await metric('ipam_controller_reconciles_total', { result: 'waiting' })) > before,
  );
  await new Promise((resolve) => setTimeout(resolve, 1_500));
  // At a steady 100 ms that would be 15 looks; doubling from 100 ms, at most 4 fit in 1.5 s.
  const looks = (await metric('ipam_controller_reconciles_total', { result: 'waiting' })) - before;
  assert.ok(looks <= 5, `${looks} looks in 1.5 s`);
});

test('EC2 failing: the reconcile is retried with backoff, and nothing is written until EC2 answers', async () => {
  const errorsBefore = await metric('ipam_controller_reconciles_total', { result: 'error' });
  aws.faults.add({ service: 'ec2', count: 6, error: { code: 'InternalError', status: 500 } });
  const node = register(instance());
  await eventually(
    'a reconcile failed',
    async () => (await metric('ipam_controller_reconciles_total', { result: 'error' })) > errorsBefore,
  );
  assert.equal(specOf(node).podCIDRs, undefined, 'nothing written from a failed answer');
  await eventually('the node has podCIDRs', () => specOf(node).podCIDRs !== undefined);
  assert.deepEqual(specOf(node).podCIDRs, [simIpv6Prefix(nextId - 1)]);
  aws.faults.reset();
});

test("EC2 throttling: the SDK's adaptive retry waits for the bucket, and the right range is assigned", async () => {
  const throttledBefore = (await cloudRequests(registry))['aws DescribeInstances throttled'] ?? 0;
  aws.throttling.enabled = true;
  try {
    while (aws.throttling.bucket.take()) {
      // Drain EC2's request bucket: the next calls are refused with RequestLimitExceeded until it refills.
    }
    const node = register(instance());
    await eventually('the node has podCIDRs', () => specOf(node).podCIDRs !== undefined);
    assert.deepEqual(specOf(node).podCIDRs, [simIpv6Prefix(nextId - 1)]);
    assert.ok(aws.calls.throttled('DescribeInstances') > 0, 'EC2 throttled the controller');
    assert.ok(((await cloudRequests(registry))['aws DescribeInstances throttled'] ?? 0) > throttledBefore);
  } finally {
    aws.throttling.enabled = false;
  }
});

test('a node changed between the decision and the patch is not written over (resourceVersion precondition)', async () => {
  const errorsBefore = await metric('ipam_controller_reconciles_total', { result: 'error' });
  const faults = api.faults;
  const plan = faults.plan.bind(faults);
  let node = '';
  // As the controller's patch arrives (and before it is served), someone else sets the node's ranges.
  faults.plan = (resource, verb) => {
    if (resource === 'nodes' && verb === 'patch' && node) {
      faults.plan = plan;
      api.store.mutate('nodes', undefined, node, (obj) => {
        Object.assign(obj['spec'] as object, {
          podCIDR: '2001:db8:dddd:1::/80',
          podCIDRs: ['2001:db8:dddd:1::/80'],
        });
      });
    }
    return plan(resource, verb);
  };
  try {
    node = register(instance());
    await eventually('the conflict is reported', () => warnings(node).length > 0);
  } finally {
    faults.plan = plan;
  }
  assert.deepEqual(specOf(node).podCIDRs, ['2001:db8:dddd:1::/80']);
  assert.ok(
    (await metric('ipam_controller_reconciles_total', { result: 'error' })) > errorsBefore,
    'the stale patch was refused (409)',
  );
});

test('a new leadership term over the held Node cache still refuses a range a cached Node holds; the conflict gauge never goes below 0', async () => {
  const {
    api: own,
    nodes,
    controller,
    inConflict,
    close,
  } = await isolatedController({
    recheckMs: 60_000,
    baseRetryDelayMs: 20,
    maxRetryDelayMs: 200,
  });
  // The new instance's prefix was delegated before to an instance since terminated, whose Node stays.
  const reused = instance();
  const prefix = reused.ipv6Prefixes?.[0] as string;
  const gone = instance({ ipv6Prefixes: [] });
  const nodeOf = (input: SimInstanceInput, spec: Record<string, unknown> = {}) =>
    own.store.create({
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name: input.id },
      spec: { providerID: awsProviderID(input), ...spec },
    } as KubeObject);
  nodeOf(gone, { podCIDR: prefix, podCIDRs: [prefix] });
  nodeOf(reused);
  const podCidrs = () =>
    (own.store.get('nodes', undefined, reused.id)?.['spec'] as { podCIDRs?: string[] } | undefined)?.podCIDRs;
  // What the cache holds, to know when it has seen a deletion.
  const cached = nodes.view('test', (n) => n.metadata?.name);
  nodes.start(); // as `run` holds it for the process
  const term = async (what: string, until: () => Promise<boolean>) => {
    const leading = new AbortController();
    const run = controller.start(leading.signal);
    await eventually(what, until);
    leading.abort();
    await run;
  };
  try {
    for (const n of [1, 2]) {
      await term(`term ${n} finds the conflict`, async () => (await inConflict()) === 1);
      assert.equal(podCidrs(), undefined, `term ${n} gave no range held by another node`);
      assert.equal(await inConflict(), 0, `after term ${n}`);
    }
    // A third term, once the stale Node is gone: the range is free and is assigned.
    own.store.delete('nodes', undefined, gone.id);
    await term('the freed range is assigned', async () => podCidrs() !== undefined);
    assert.deepEqual(podCidrs(), [prefix]);
    assert.equal(await inConflict(), 0);
    // A Node of an earlier term's conflicts deleted between terms: no term's handler outlives it.
    own.store.delete('nodes', undefined, reused.id);
    await eventually('the cache has seen the deletion', () => cached.get(reused.id) === undefined);
    assert.equal(await inConflict(), 0);
  } finally {
    await close();
  }
});

test('a node deleted while the cloud answers is not left counted in conflict', async () => {
  const {
    api: own,
    registry: ownRegistry,
    controller,
    inConflict,
    close,
  } = await isolatedController({ recheckMs: 200 });
  const reconciles = async (result: string) =>
    (await ownRegistry.getSingleMetric('ipam_controller_reconciles_total')?.get())?.values.find(
      (v) => v.labels['result'] === result,
    )?.value ?? 0;
  // Its ranges differ from the cloud's: a conflict, were it still there when EC2 answers.
  const input = instance();
  const name = input.id;
  // Every EC2 answer slow for now: the file's other controller may send a call first.
  aws.faults.add({ service: 'ec2', latencyMs: 800 });
  own.store.create({
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name },
    spec: { providerID: awsProviderID(input), podCIDRs: ['2001:db8:ffff::/64'] },
  } as KubeObject);
  const leading = new AbortController();
  const run = controller.start(leading.signal);
  try {
    // Its reconcile is running, waiting for EC2's slow answer.
    await eventually('the reconcile is under way', () => reconcileRunning(ownRegistry));
    own.store.delete('nodes', undefined, name);
    await eventually('the reconcile ends as deleted', async () => (await reconciles('deleted')) > 0);
    assert.equal(await reconciles('conflict'), 0, 'no conflict decided for a node that is gone');
    assert.equal(await inConflict(), 0);
  } finally {
    leading.abort();
    await run;
    aws.faults.reset();
    await close();
  }
});

test('leadership ending while EC2 answers slowly (throttled): the controller stops within a second', async () => {
  const { api: own, registry: ownRegistry, controller, close } = await isolatedController();
  const input = instance();
  own.store.create({
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name: input.id },
    spec: { providerID: awsProviderID(input) },
  } as KubeObject);
  aws.faults.add({ service: 'ec2', latencyMs: 5_000 });
  const leading = new AbortController();
  const run = controller.start(leading.signal);
  try {
    // The node's reconcile is under way, waiting for the cloud's answer 5 s away.
    await eventually('the reconcile is under way', () => reconcileRunning(ownRegistry));
    const ms = await msToStop(leading, run);
    assert.ok(ms < 1_000, `stopped ${Math.round(ms)} ms after leadership ended`);
    assert.equal(own.store.get('nodes', undefined, input.id)?.['spec']?.['podCIDRs' as never], undefined);
  } finally {
    leading.abort();
    await run;
    aws.faults.reset();
    await close();
  }
});

test('leadership ending while the API server is slow to take the conflict Event: the controller stops within a second', async () => {
  const { api: own, controller, close } = await isolatedController();
  // Event creates take 10 s (the brownout that costs the lease); count the ones sent.
  let eventCreates = 0;
  const plan = own.faults.plan.bind(own.faults);
  own.faults.plan = (resource, verb, namespace) => {
    if (resource === 'events' && verb === 'create') eventCreates++;
    return plan(resource, verb, namespace);
  };
  own.faults.latency(10_000, { resource: 'events', verbs: ['create'] });
  const input = instance();
  // Its podCIDRs differ from the cloud's: a conflict, reported with an Event.
  own.store.create({
    apiVersion: 'v1',
    kind: 'Node',
    metadata: { name: input.id },
    spec: { providerID: awsProviderID(input), podCIDRs: ['2001:db8:ffff::/64'] },
  } as KubeObject);
  const leading = new AbortController();
  const run = controller.start(leading.signal);
  try {
    await eventually('the conflict Event create is in flight', () => eventCreates === 1);
    const ms = await msToStop(leading, run);
    assert.ok(ms < 1_000, `stopped ${Math.round(ms)} ms after leadership ended`);
  } finally {
    leading.abort();
    await run;
    await close();
  }
});
