/**
 * Cloud IPAM across leadership terms over the process's Node watch (held for the process, as `run`
 * does): a new term must know every range already held from the warm cache, since it lists nothing.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Registry } from 'prom-client';
import { createAwsClients } from '../../cloud/aws/clients.ts';
import { AwsNodeIdentifier } from '../../cloud/aws/identify.ts';
import { nodeInformer } from '../../kube/shared-informer.ts';
import { type KubeObject, startApiServer } from '../../sim/apiserver/index.ts';
import { awsProviderID, simInstanceId, simIpv6Prefix } from '../../sim/aws/scenario.ts';
import { startAwsSimulator } from '../../sim/aws/server.ts';
import { IpamController } from './ipam-controller.ts';
import { AwsPodCidrSource } from './sources.ts';

const clusterName = 'ipv6.example.com';
const zone = 'us-east-1a';

test('a second term still refuses a range a cached Node holds, and the conflict gauge never goes below 0', async () => {
  const api = await startApiServer();
  const aws = await startAwsSimulator({ throttling: false });
  const clients = await createAwsClients({
    region: aws.region,
    endpoint: aws.endpoint,
    credentials: aws.credentials,
    maxAttempts: 2,
  });
  const registry = new Registry();
  const kubeConfig = api.kubeConfig();
  const nodes = nodeInformer(kubeConfig);
  const controller = new IpamController({
    kubeConfig,
    nodes,
    source: new AwsPodCidrSource(
      new AwsNodeIdentifier({
        ec2: clients.ec2,
        clusterName,
        batchWindowMs: 5,
        callBudget: { burst: 1_000, perSecond: 1_000 },
      }),
    ),
    recheckMs: 60_000,
    baseRetryDelayMs: 20,
    maxRetryDelayMs: 200,
    registry,
  });
  // The new instance's prefix was delegated before to an instance since terminated, whose Node stays.
  const prefix = simIpv6Prefix(1);
  aws.ec2.addInstances([
    { id: simInstanceId(1), zone, cluster: clusterName, instanceGroup: 'nodes', ipv6Prefixes: [prefix] },
    { id: simInstanceId(2), zone, cluster: clusterName, instanceGroup: 'nodes', ipv6Prefixes: [] },
  ]);
  const node = (id: number, name: string, spec: Record<string, unknown> = {}) =>
    api.store.create({
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name },
      spec: { providerID: awsProviderID({ id: simInstanceId(id), zone }), ...spec },
    } as KubeObject);
  const stale = simInstanceId(2);
  node(2, stale, { podCIDR: prefix, podCIDRs: [prefix] });
  node(1, simInstanceId(1));
  const inConflict = async () =>
    (await registry.getSingleMetric('ipam_controller_nodes_in_conflict')?.get())?.values[0]?.value ?? 0;
  const podCidrs = () =>
    (api.store.get('nodes', undefined, simInstanceId(1))?.['spec'] as { podCIDRs?: string[] } | undefined)
      ?.podCIDRs;
  const until = async (what: string, check: () => Promise<boolean>) => {
    for (let i = 0; i < 500 && !(await check()); i++) await new Promise((resolve) => setTimeout(resolve, 20));
    assert.ok(await check(), `timed out waiting until ${what}`);
  };
  // What the cache holds, to know when it has seen a deletion.
  const cached = nodes.view('test', (n) => n.metadata?.name);
  nodes.start(); // as `run` holds it for the process
  try {
    for (const term of [1, 2]) {
      const leading = new AbortController();
      const run = controller.start(leading.signal);
      await until(`term ${term} finds the conflict`, async () => (await inConflict()) === 1);
      assert.equal(podCidrs(), undefined, `term ${term} gave no range held by another node`);
      leading.abort();
      await run;
      assert.equal(await inConflict(), 0, `after term ${term}`);
    }
    // A third term, once the stale Node is gone: the range is free and is assigned.
    api.store.delete('nodes', undefined, stale);
    const leading = new AbortController();
    const run = controller.start(leading.signal);
    await until('the freed range is assigned', async () => podCidrs() !== undefined);
    assert.deepEqual(podCidrs(), [prefix]);
    leading.abort();
    await run;
    assert.equal(await inConflict(), 0);
    // A Node of an earlier term's conflicts deleted between terms: no term's handler outlives it.
    api.store.delete('nodes', undefined, simInstanceId(1));
    await until('the cache has seen the deletion', async () => cached.get(simInstanceId(1)) === undefined);
    assert.equal(await inConflict(), 0);
  } finally {
    await nodes.close();
    clients.destroy();
    await Promise.all([api.close(), aws.close()]);
  }
});
