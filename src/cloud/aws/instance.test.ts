import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Instance } from '@aws-sdk/client-ec2';
import { ForbiddenError, UnavailableError } from '../../errors.ts';
import { addressesOf, identityFromInstance, instanceStateOf, ownedByCluster, tagsOf } from './instance.ts';

const cluster = 'a.example.com';

function instance(overrides: Partial<Instance> = {}): Instance {
  return {
    InstanceId: 'i-0123456789abcdef0',
    State: { Name: 'running' },
    Placement: { AvailabilityZone: 'us-east-1a' },
    PrivateIpAddress: '10.0.0.5',
    PrivateDnsName: 'ip-10-0-0-5.ec2.internal',
    Tags: [
      { Key: 'KubernetesCluster', Value: cluster },
      { Key: 'kops.k8s.io/instancegroup', Value: 'nodes' },
    ],
    ...overrides,
  };
}

describe('EC2 instance facts', () => {
  it('decides cluster ownership from the legacy and the modern tag', () => {
    const table: [Record<string, string>, boolean][] = [
      [{ KubernetesCluster: cluster }, true],
      [{ [`kubernetes.io/cluster/${cluster}`]: 'owned' }, true],
      [{ [`kubernetes.io/cluster/${cluster}`]: 'shared' }, true],
      [{ [`kubernetes.io/cluster/${cluster}`]: 'other' }, false],
      [{ KubernetesCluster: 'b.example.com', [`kubernetes.io/cluster/${cluster}`]: 'owned' }, false],
      [{ 'kubernetes.io/cluster/b.example.com': 'owned' }, false],
      [{}, false],
    ];
    for (const [tags, owned] of table)
      assert.equal(ownedByCluster(tags, cluster), owned, JSON.stringify(tags));
  });

  it('normalises EC2 state names', () => {
    assert.equal(instanceStateOf('shutting-down'), 'stopping');
    assert.equal(instanceStateOf('pending'), 'pending');
    assert.equal(instanceStateOf('rebooting'), 'unknown');
    assert.equal(instanceStateOf(undefined), 'unknown');
  });

  it('names the incarnation: the instance id, created at its LaunchTime (when EC2 says it)', () => {
    const launched = new Date('2026-05-04T03:02:01Z');
    assert.deepEqual(identityFromInstance(instance({ LaunchTime: launched }), cluster).incarnation, {
      id: 'i-0123456789abcdef0',
      createdAt: launched,
    });
    assert.deepEqual(identityFromInstance(instance(), cluster).incarnation, { id: 'i-0123456789abcdef0' });
    assert.deepEqual(
      identityFromInstance(instance({ LaunchTime: new Date(Number.NaN) }), cluster).incarnation,
      { id: 'i-0123456789abcdef0' },
      'a time that is none is no creation time',
    );
  });

  it('lists each address once, private first', () => {
    const addresses = addressesOf(
      instance({
        PublicIpAddress: '203.0.113.1',
        PublicDnsName: '',
        NetworkInterfaces: [
          { Attachment: { DeviceIndex: 1 }, Ipv6Addresses: [{ Ipv6Address: '2600::9' }] },
          { Attachment: { DeviceIndex: 0 }, Ipv6Addresses: [{ Ipv6Address: '2600::1' }] },
        ],
      }),
    );
    assert.deepEqual(addresses, [
      { type: 'InternalIP', address: '10.0.0.5' },
      { type: 'InternalIP', address: '2600::1' },
      { type: 'InternalDNS', address: 'ip-10-0-0-5.ec2.internal' },
      { type: 'ExternalIP', address: '203.0.113.1' },
    ]);
  });

  it('derives the identity, with a worker label per lifecycle', () => {
    const identity = identityFromInstance(instance({ InstanceLifecycle: 'scheduled' }), cluster);
    assert.equal(identity.instanceGroup, 'nodes');
    assert.equal(identity.zone, 'us-east-1a');
    assert.deepEqual(identity.cloudLabels, { 'node-role.kubernetes.io/scheduled-worker': 'true' });
  });

  it('notes kops’ api-server node-template tag (the kops CLI’s APIServerNodes)', () => {
    const tagged = instance({
      Tags: [
        ...(instance().Tags ?? []),
        {
          Key: 'k8s.io/cluster-autoscaler/node-template/label/node-role.kubernetes.io/api-server',
          Value: '',
        },
      ],
    });
    assert.equal(identityFromInstance(tagged, cluster).apiServerTagged, true);
    assert.equal(identityFromInstance(instance(), cluster).apiServerTagged, undefined);
  });

  it('records each attached ENI with the IPv6 prefixes delegated to it (what IPAM reads)', () => {
    const identity = identityFromInstance(
      instance({
        NetworkInterfaces: [
          { NetworkInterfaceId: 'eni-1', Ipv6Prefixes: [{ Ipv6Prefix: '2600:1f13::/80' }, {}] },
          { NetworkInterfaceId: 'eni-2' },
        ],
      }),
      cluster,
    );
    assert.deepEqual(identity.networkInterfaces, [
      { networkInterfaceId: 'eni-1', ipv6Prefixes: ['2600:1f13::/80'] },
      { networkInterfaceId: 'eni-2', ipv6Prefixes: [] },
    ]);
    assert.deepEqual(identityFromInstance(instance(), cluster).networkInterfaces, []);
  });

  it('refuses with a reason another cluster, a dead instance and a missing group tag', () => {
    const reason = (i: Instance) => {
      try {
        identityFromInstance(i, cluster);
      } catch (err) {
        assert.ok(err instanceof ForbiddenError);
        return err.details?.['reason'];
      }
      assert.fail('expected a refusal');
    };
    assert.equal(
      reason(instance({ Tags: [{ Key: 'kops.k8s.io/instancegroup', Value: 'nodes' }] })),
      'foreign-cluster',
    );
    assert.equal(reason(instance({ State: { Name: 'stopping' } })), 'not-running');
    // A record without a state is a broken answer, not a stopped instance: a fault, never a refusal.
    assert.throws(
      () => identityFromInstance(instance({ State: undefined }), cluster),
      (err: unknown) => err instanceof UnavailableError && err.details?.['reason'] === 'malformed-answer',
    );
    assert.equal(
      reason(
        instance({
          Tags: [
            { Key: 'KubernetesCluster', Value: cluster },
            { Key: 'kops.k8s.io/instancegroup', Value: 'a/../b' },
          ],
        }),
      ),
      'invalid-instance-group',
    );
    assert.equal(
      reason(instance({ Tags: [{ Key: 'KubernetesCluster', Value: cluster }] })),
      'no-instance-group',
    );
    assert.equal(tagsOf({ Tags: [{ Key: 'k' }] })['k'], '');
  });
});
