import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Registry } from 'prom-client';
import { awsProviderID, clusterInstances } from '../sim/aws/scenario.ts';
import { startAwsSimulator } from '../sim/aws/server.ts';
import type { SimInstanceInput } from '../sim/aws/world.ts';
import { simulatorAuth } from '../sim/gce/clients.ts';
import { startGceSimulator } from '../sim/gce/simulator.ts';
import { MemfsVfs } from '../statestore/memfs-vfs.ts';
import { cloudRequests } from '../testing/cloud-calls.ts';
import { AwsNodeIdentifier } from './aws/identify.ts';
import { cloudFromConfig } from './from-config.ts';
import { GceNodeIdentifier } from './gce/node-identifier.ts';
import { MetalNodeIdentifier } from './metal/node-identifier.ts';
import { cloudCallMetrics } from './metrics.ts';

const vfs = new MemfsVfs(new URL('memfs://from-config/cluster'));

describe('cloudFromConfig', () => {
  test('aws: the configured region and the overridden endpoint', async () => {
    const cloud = await cloudFromConfig(
      {
        cloud: 'aws',
        clusterName: 'a.example.com',
        server: { Listen: ':3988', provider: { aws: { nodesRoles: [], Region: 'eu-west-1' } } },
      },
      vfs,
      {
        aws: {
          endpoint: 'http://127.0.0.1:1',
          credentials: { accessKeyId: 'AKID', secretAccessKey: 'secret' },
        },
      },
    );
    try {
      assert.ok(cloud.nodeIdentifier instanceof AwsNodeIdentifier);
      assert.equal(cloud.identifiesByNodeName, false);
    } finally {
      cloud.close();
    }
  });

  test('gce: the configured project', async () => {
    const cloud = await cloudFromConfig(
      {
        cloud: 'gce',
        clusterName: 'g.example.com',
        server: { Listen: ':3988', provider: { gce: { projectID: 'p1' } } },
      },
      vfs,
      {
        gce: {
          endpoint: 'http://127.0.0.1:1',
          auth: { request: async () => assert.fail('no call expected') },
        },
      },
    );
    assert.ok(cloud.nodeIdentifier instanceof GceNodeIdentifier);
  });

  test('metal: the inventory in the state store, nodes identified by name', async () => {
    const cloud = await cloudFromConfig(
      { cloud: 'metal', clusterName: 'm.example.com', server: undefined },
      vfs,
    );
    assert.ok(cloud.nodeIdentifier instanceof MetalNodeIdentifier);
    assert.equal(cloud.identifiesByNodeName, true);
    const result = (await cloud.nodeIdentifier.identify(['host-1'])).get('host-1');
    assert.match(
      result?.ok ? '' : (result?.error.message ?? ''),
      /no metal inventory at memfs:\/\/from-config/,
    );
  });

  test("aws and gce: the providers' clients count their calls on the recorder they are given", async () => {
    const registry = new Registry();
    const cloudCalls = cloudCallMetrics(registry);
    const aws = await startAwsSimulator({ throttling: false });
    const gce = await startGceSimulator({ project: 'kops-prod' });
    const [instance] = clusterInstances({ cluster: 'a.example.com', instanceGroup: 'nodes', count: 1 });
    aws.ec2.addInstances([instance as SimInstanceInput]);
    const [vm] = gce.world.seedInstanceGroup({
      zone: 'us-east4-a',
      instanceGroup: 'nodes',
      count: 1,
      clusterName: 'g.example.com',
    });
    const onAws = await cloudFromConfig(
      {
        cloud: 'aws',
        clusterName: 'a.example.com',
        server: { Listen: ':3988', provider: { aws: { nodesRoles: [], Region: aws.region } } },
      },
      vfs,
      { aws: { endpoint: aws.endpoint, credentials: aws.credentials } },
      undefined,
      cloudCalls,
    );
    const onGce = await cloudFromConfig(
      {
        cloud: 'gce',
        clusterName: 'g.example.com',
        server: { Listen: ':3988', provider: { gce: { projectID: 'kops-prod' } } },
      },
      vfs,
      { gce: { endpoint: gce.endpoint, auth: simulatorAuth(gce) } },
      undefined,
      cloudCalls,
    );
    try {
      const awsID = awsProviderID(instance as SimInstanceInput);
      assert.ok((await onAws.nodeIdentifier.identify([awsID])).get(awsID)?.ok);
      const gceID = `gce://kops-prod/us-east4-a/${vm?.name}`;
      const identified = (await onGce.nodeIdentifier.identify([gceID])).get(gceID);
      assert.ok(identified?.ok, identified?.ok ? '' : identified?.error.message);
      const counted = await cloudRequests(registry);
      assert.equal(counted['aws DescribeInstances ok'], 1);
      assert.ok((counted['gce instances.get ok'] ?? 0) >= 1, JSON.stringify(counted));
      assert.deepEqual(
        Object.keys(counted).filter((k) => !k.endsWith(' ok')),
        [],
        'nothing failed',
      );
    } finally {
      onAws.close();
      onGce.close();
      await aws.close();
      await gce.close();
    }
  });

  test('a cloud without its credentials is a config error naming them', async () => {
    const saved = process.env['LINODE_TOKEN'];
    delete process.env['LINODE_TOKEN'];
    try {
      await assert.rejects(
        cloudFromConfig({ cloud: 'linode', clusterName: 'l.example.com', server: undefined }, vfs),
        { kind: 'config', message: /LINODE_TOKEN/ },
      );
    } finally {
      if (saved !== undefined) process.env['LINODE_TOKEN'] = saved;
    }
  });
});
