import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { MemfsVfs } from '../statestore/memfs-vfs.ts';
import { AwsNodeIdentifier } from './aws/identify.ts';
import { cloudFromConfig } from './from-config.ts';
import { GceNodeIdentifier } from './gce/node-identifier.ts';
import { MetalNodeIdentifier } from './metal/node-identifier.ts';

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

  test('another cloud is a config error naming the supported ones', async () => {
    await assert.rejects(
      cloudFromConfig({ cloud: 'openstack', clusterName: 'o.example.com', server: undefined }, vfs),
      { kind: 'config', message: /implemented for aws, gce, metal only/ },
    );
  });
});
