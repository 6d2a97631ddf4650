// `kops_instance_group_nodes_needing_update` end to end on AWS: the metrics component lists the Auto
// Scaling groups through the real SDK from the simulator, which renders launch templates, mixed-instances
// policies and members as AWS does, and answers ec2:DescribeLaunchTemplates as EC2 does — or refuses it,
// as for kops' control-plane role, which lacks that permission.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Registry } from 'prom-client';
import { createAwsProvider } from '../cloud/aws/provider.ts';
import type { SigV4Credentials } from '../cloud/aws/sigv4.ts';
import { nodeInformer } from '../kube/shared-informer.ts';
import { createLogger } from '../log.ts';
import { type SimApiServer, startApiServer } from '../sim/apiserver/index.ts';
import { clusterInstances, simLaunchTemplateId } from '../sim/aws/scenario.ts';
import { type AwsSimulator, startAwsSimulator } from '../sim/aws/server.ts';
import type { InstanceGroup } from '../statestore/kops-types.ts';
import { ValidationMetrics } from './validation-metrics.ts';

const clusterName = 'rolling.example.com';
const templateId = simLaunchTemplateId(7);
const instanceGroups = ['nodes', 'legacy'].map(
  (name) =>
    ({
      apiVersion: 'kops.k8s.io/v1alpha2',
      kind: 'InstanceGroup',
      metadata: { name },
      spec: { role: 'Node' },
    }) as InstanceGroup,
);

describe('instances needing a rolling update, from the simulated AWS account', () => {
  let aws: AwsSimulator;
  let api: SimApiServer;

  before(async () => {
    [aws, api] = await Promise.all([startAwsSimulator(), startApiServer()]);
    // kops writes `$Latest` for the nodes' template; version 4 is the latest, so the members launched
    // from 2 and 3 are out of date. The legacy group's launch configuration needs no EC2 call.
    aws.ec2.addLaunchTemplate({ id: templateId, name: `nodes.${clusterName}`, latestVersion: 4 });
    const nodes = clusterInstances({ cluster: clusterName, instanceGroup: 'nodes', count: 4 });
    const legacy = clusterInstances({ cluster: clusterName, instanceGroup: 'legacy', count: 2, firstId: 10 });
    aws.ec2.addInstances([...nodes, ...legacy]);
    const [n1, n2, n3, n4] = nodes.map((i) => i.id) as [string, string, string, string];
    aws.autoscaling.addAutoScalingGroup({
      name: `nodes.${clusterName}`,
      cluster: clusterName,
      instanceGroup: 'nodes',
      launch: { mixedInstancesPolicy: { launchTemplate: { id: templateId, version: '$Latest' } } },
      members: [
        n1,
        n2,
        { instanceId: n3, launchedFrom: { launchTemplate: { id: templateId, version: '3' } } },
        { instanceId: n4, launchedFrom: { launchTemplate: { id: templateId, version: '2' } } },
      ],
    });
    aws.autoscaling.addAutoScalingGroup({
      name: `legacy.${clusterName}`,
      cluster: clusterName,
      instanceGroup: 'legacy',
      launch: { launchConfigurationName: 'legacy-2' },
      members: legacy.map((i) => i.id),
    });
  });
  after(async () => {
    await Promise.all([aws.close(), api.close()]);
  });

  /**
   * Runs the metrics component with these AWS credentials until its refresh has listed the groups
   * `refreshes` times; returns its samples of the gauge by instance group and the AWS lister's log lines.
   */
  async function scrape(credentials: SigV4Credentials, refreshes: number) {
    const lines: string[] = [];
    const logger = createLogger({
      level: 'warn',
      destination: { write: (line: string) => lines.push(line) },
    });
    const provider = await createAwsProvider({
      clusterName,
      region: aws.region,
      endpoint: aws.endpoint,
      credentials: { ...credentials },
      maxAttempts: 1,
      logger,
    });
    let listed = 0;
    const registry = new Registry();
    const kubeConfig = api.kubeConfig();
    const metrics = new ValidationMetrics({
      clusterName,
      kubeConfig,
      nodes: nodeInformer(kubeConfig),
      core: { listComponentStatus: async () => ({ items: [] }) },
      cloudGroups: {
        list: async (name) => {
          const groups = await provider.cloudGroups.list(name);
          listed++;
          return groups;
        },
      },
      instanceGroups: async () => instanceGroups,
      registry,
      refreshIntervalMs: 20,
    });
    const stop = new AbortController();
    const running = metrics.start(stop.signal);
    try {
      // Listed often enough, and the gauges have values (the informers have synced).
      const settled = async () =>
        listed >= refreshes && /^kops_instance_group_nodes\{/m.test(await registry.metrics());
      for (let i = 0; i < 400 && !(await settled()); i++)
        await new Promise((resolve) => setTimeout(resolve, 25));
      assert.ok(await settled(), 'the refresh never listed the groups');
      const samples = new Map<string, number>();
      const line =
        /^kops_instance_group_nodes_needing_update\{cluster_name="rolling\.example\.com",instance_group="([^"]+)"\} (\d+)$/gm;
      for (const [, group, value] of (await registry.metrics()).matchAll(line))
        samples.set(group as string, Number(value));
      return { samples, lines };
    } finally {
      stop.abort();
      await running;
      provider.clients.destroy();
    }
  }

  test('counts the members launched from older versions than $Latest stands for, and from an older launch configuration', async () => {
    const { samples, lines } = await scrape(aws.credentials, 1);
    assert.deepEqual(Object.fromEntries(samples), { legacy: 0, nodes: 2 });
    assert.deepEqual(lines, []);
  });

  test('a role without ec2:DescribeLaunchTemplates: no sample for the group on $Latest, one warning', async () => {
    const role = aws.sts.addUser('kops-control-plane', { deniedActions: ['ec2:DescribeLaunchTemplates'] });
    const { samples, lines } = await scrape(role, 3);
    assert.deepEqual(
      Object.fromEntries(samples),
      { legacy: 0 },
      'an unknown version is no sample, never a zero that reads as up to date',
    );
    assert.equal(lines.length, 1, 'one warning however many refreshes');
    const record = JSON.parse(lines[0] ?? '{}') as { msg: string; err: string };
    assert.match(record.msg, /^launch template versions are not known/);
    assert.match(record.err, /UnauthorizedOperation.*grant ec2:DescribeLaunchTemplates/);
  });
});
