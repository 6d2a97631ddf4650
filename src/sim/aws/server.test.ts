import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import {
  DescribeAutoScalingGroupsCommand,
  paginateDescribeAutoScalingGroups,
} from '@aws-sdk/client-auto-scaling';
import { DescribeInstancesCommand, EC2Client, paginateDescribeInstances } from '@aws-sdk/client-ec2';
import { GetCallerIdentityCommand, STSClient } from '@aws-sdk/client-sts';
import { type AwsClients, createAwsClients } from '../../cloud/aws/clients.ts';
import { canonicalRequest, computeSignature, formatAmzDate, signSigV4 } from '../../cloud/aws/sigv4.ts';
import { clusterInstances, simInstanceId } from './scenario.ts';
import { type AwsSimulator, startAwsSimulator } from './server.ts';

const cluster = 'sim.example.com';

async function rejection(promise: Promise<unknown>): Promise<{ name: string; status: number | undefined }> {
  try {
    await promise;
  } catch (err) {
    const e = err as { name: string; $metadata?: { httpStatusCode?: number } };
    return { name: e.name, status: e.$metadata?.httpStatusCode };
  }
  assert.fail('expected the call to fail');
}

describe('AWS simulator', () => {
  let sim: AwsSimulator;
  let clients: AwsClients;

  before(async () => {
    sim = await startAwsSimulator({ throttling: false });
    sim.ec2.addInstances(clusterInstances({ cluster, instanceGroup: 'nodes', count: 12 }));
    sim.ec2.addInstances([
      {
        id: 'i-0aaaaaaaaaaaaaaaa',
        zone: 'us-east-1b',
        cluster,
        instanceGroup: 'spot',
        lifecycle: 'spot',
        publicIp: '203.0.113.7',
        publicDnsName: 'ec2-203-0-113-7.compute-1.amazonaws.com',
        ipv6: '2600:1f18::7',
        state: 'stopped',
        tags: { 'k8s.io/role/node': '1', quote: 'a<b&"c"' },
      },
    ]);
    clients = await createAwsClients({
      region: sim.region,
      endpoint: sim.endpoint,
      credentials: sim.credentials,
      maxAttempts: 1,
    });
  });
  after(async () => {
    clients.destroy();
    await sim.close();
  });

  it('answers DescribeInstances by id in the shape the EC2 SDK parses', async () => {
    const out = await clients.ec2.send(
      new DescribeInstancesCommand({ InstanceIds: ['i-0aaaaaaaaaaaaaaaa', simInstanceId(1)] }),
    );
    const instances = out.Reservations?.flatMap((r) => r.Instances ?? []) ?? [];
    assert.equal(instances.length, 2);
    const spot = instances.find((i) => i.InstanceId === 'i-0aaaaaaaaaaaaaaaa');
    assert.equal(spot?.State?.Name, 'stopped');
    assert.equal(spot?.State?.Code, 80);
    assert.equal(spot?.InstanceLifecycle, 'spot');
    assert.equal(spot?.Placement?.AvailabilityZone, 'us-east-1b');
    assert.equal(spot?.PublicIpAddress, '203.0.113.7');
    assert.equal(spot?.NetworkInterfaces?.[0]?.Ipv6Addresses?.[0]?.Ipv6Address, '2600:1f18::7');
    const tags = Object.fromEntries((spot?.Tags ?? []).map((t) => [t.Key, t.Value]));
    assert.equal(tags['kops.k8s.io/instancegroup'], 'spot');
    assert.equal(tags[`kubernetes.io/cluster/${cluster}`], 'owned');
    assert.equal(tags['quote'], 'a<b&"c"');
    const node = instances.find((i) => i.InstanceId === simInstanceId(1));
    assert.match(node?.PrivateIpAddress ?? '', /^10\./);
    assert.match(node?.PrivateDnsName ?? '', /^ip-10-.*\.ec2\.internal$/);
  });

  it('raises InvalidInstanceID.NotFound and .Malformed as EC2 does', async () => {
    const missing = await rejection(
      clients.ec2.send(
        new DescribeInstancesCommand({ InstanceIds: [simInstanceId(1), 'i-0bbbbbbbbbbbbbbbb'] }),
      ),
    );
    assert.deepEqual(missing, { name: 'InvalidInstanceID.NotFound', status: 400 });
    const malformed = await rejection(
      clients.ec2.send(new DescribeInstancesCommand({ InstanceIds: ['i-xyz'] })),
    );
    assert.deepEqual(malformed, { name: 'InvalidInstanceID.Malformed', status: 400 });
  });

  it('filters by tag and state and pages with MaxResults/NextToken', async () => {
    const pages = paginateDescribeInstances(
      { client: clients.ec2, pageSize: 5 },
      {
        Filters: [
          { Name: 'tag:kops.k8s.io/instancegroup', Values: ['nodes'] },
          { Name: 'instance-state-name', Values: ['pending', 'running'] },
        ],
      },
    );
    const sizes: number[] = [];
    const ids: string[] = [];
    for await (const page of pages) {
      const instances = page.Reservations?.flatMap((r) => r.Instances ?? []) ?? [];
      sizes.push(instances.length);
      ids.push(...instances.map((i) => i.InstanceId as string));
    }
    assert.deepEqual(sizes, [5, 5, 2]);
    assert.equal(new Set(ids).size, 12);
    const stopped = await clients.ec2.send(
      new DescribeInstancesCommand({ Filters: [{ Name: 'instance-state-name', Values: ['stopped'] }] }),
    );
    assert.deepEqual(
      stopped.Reservations?.map((r) => r.Instances?.[0]?.InstanceId),
      ['i-0aaaaaaaaaaaaaaaa'],
    );
  });

  it('lists Auto Scaling groups by tag, paged', async () => {
    for (let g = 0; g < 7; g++) {
      sim.autoscaling.addAutoScalingGroup({
        name: `group-${g}.${cluster}`,
        cluster,
        instanceGroup: `group-${g}`,
        minSize: 1,
        maxSize: 3,
        desiredCapacity: 2,
        members: [simInstanceId(g + 1), { instanceId: simInstanceId(g + 2), healthStatus: 'Unhealthy' }],
      });
    }
    sim.autoscaling.addAutoScalingGroup({
      name: 'other',
      cluster: 'other.example.com',
      instanceGroup: 'nodes',
    });
    const names: string[] = [];
    let pagesSeen = 0;
    for await (const page of paginateDescribeAutoScalingGroups(
      { client: clients.autoscaling, pageSize: 3 },
      { Filters: [{ Name: 'tag-key', Values: [`kubernetes.io/cluster/${cluster}`] }] },
    )) {
      pagesSeen++;
      for (const g of page.AutoScalingGroups ?? []) names.push(g.AutoScalingGroupName as string);
    }
    assert.equal(pagesSeen, 3);
    assert.equal(names.length, 7);
    assert.ok(!names.includes('other'));
    const one = await clients.autoscaling.send(
      new DescribeAutoScalingGroupsCommand({ AutoScalingGroupNames: [`group-0.${cluster}`] }),
    );
    const group = one.AutoScalingGroups?.[0];
    assert.equal(group?.DesiredCapacity, 2);
    assert.equal(group?.MaxSize, 3);
    assert.deepEqual(
      group?.Instances?.map((i) => [i.InstanceId, i.LifecycleState, i.HealthStatus, i.AvailabilityZone]),
      [
        [simInstanceId(1), 'InService', 'Healthy', 'us-east-1a'],
        [simInstanceId(2), 'InService', 'Unhealthy', 'us-east-1b'],
      ],
    );
    assert.equal(group?.Tags?.find((t) => t.Key === 'kops.k8s.io/instancegroup')?.Value, 'group-0');
  });

  it('answers GetCallerIdentity with the assumed role of an instance profile', async () => {
    const session = sim.sts.addInstanceProfileSession(`nodes.${cluster}`, simInstanceId(3));
    const sts = new STSClient({
      region: sim.region,
      endpoint: sim.endpoint,
      credentials: session,
      maxAttempts: 1,
    });
    const who = await sts.send(new GetCallerIdentityCommand({}));
    sts.destroy();
    assert.equal(who.Account, sim.account);
    assert.equal(who.Arn, `arn:aws:sts::${sim.account}:assumed-role/nodes.${cluster}/${simInstanceId(3)}`);
    assert.match(who.UserId ?? '', new RegExp(`^AROA[A-Z2-7]{17}:${simInstanceId(3)}$`));
    const me = await clients.sts.send(new GetCallerIdentityCommand({}));
    assert.equal(me.Arn, `arn:aws:iam::${sim.account}:user/kops-controller`);
  });

  describe('SigV4 on STS', () => {
    it('rejects a wrong secret key with SignatureDoesNotMatch', async () => {
      const sts = new STSClient({
        region: sim.region,
        endpoint: sim.endpoint,
        credentials: { ...sim.credentials, secretAccessKey: 'wrong' },
        maxAttempts: 1,
      });
      assert.deepEqual(await rejection(sts.send(new GetCallerIdentityCommand({}))), {
        name: 'SignatureDoesNotMatch',
        status: 403,
      });
      sts.destroy();
    });

    it('rejects an unknown or revoked access key with InvalidClientTokenId', async () => {
      const revoked = sim.sts.addInstanceProfileSession('nodes', simInstanceId(4));
      sim.sts.removeCredentials(revoked.accessKeyId);
      const sts = new STSClient({
        region: sim.region,
        endpoint: sim.endpoint,
        credentials: revoked,
        maxAttempts: 1,
      });
      assert.deepEqual(await rejection(sts.send(new GetCallerIdentityCommand({}))), {
        name: 'InvalidClientTokenId',
        status: 403,
      });
      sts.destroy();
    });

    it('rejects a signature dated more than 15 minutes ago', async () => {
      const sts = new STSClient({
        region: sim.region,
        endpoint: sim.endpoint,
        credentials: sim.credentials,
        maxAttempts: 1,
        systemClockOffset: -16 * 60_000,
      });
      // The SDK would correct its clock from the response and retry; one attempt shows the refusal.
      assert.deepEqual(await rejection(sts.send(new GetCallerIdentityCommand({}))), {
        name: 'SignatureDoesNotMatch',
        status: 403,
      });
      sts.destroy();
    });

    it('rejects a request whose signed header was altered after signing', async () => {
      const body = 'Action=GetCallerIdentity&Version=2011-06-15';
      const host = new URL(sim.endpoint).host;
      const headers = {
        host,
        'content-type': 'application/x-www-form-urlencoded; charset=utf-8',
        'x-kops-request-sha': 'c2lnbmVk',
      };
      const signed = {
        ...headers,
        ...signSigV4({ method: 'POST', url: '/', headers, body }, sim.credentials, {
          region: sim.region,
          service: 'sts',
        }),
      };
      const ok = await fetch(`${sim.endpoint}/`, { method: 'POST', headers: signed, body });
      assert.equal(ok.status, 200);
      assert.match(await ok.text(), /<Arn>arn:aws:iam::123456789012:user\/kops-controller<\/Arn>/);
      const altered = await fetch(`${sim.endpoint}/`, {
        method: 'POST',
        headers: { ...signed, 'x-kops-request-sha': 'YWx0ZXJlZA' },
        body,
      });
      assert.equal(altered.status, 403);
      assert.match(await altered.text(), /<Code>SignatureDoesNotMatch<\/Code>/);
      const unsigned = await fetch(`${sim.endpoint}/`, { method: 'POST', headers, body });
      assert.equal(unsigned.status, 403);
      assert.match(await unsigned.text(), /<Code>MissingAuthenticationToken<\/Code>/);
    });

    it('accepts a presigned GetCallerIdentity URL until it expires (kops v2 tokens)', async () => {
      const host = new URL(sim.endpoint).host;
      const signedAt = new Date();
      const amzDate = formatAmzDate(signedAt);
      const scope = {
        accessKeyId: sim.credentials.accessKeyId,
        date: amzDate.slice(0, 8),
        region: sim.region,
        service: 'sts',
      };
      const query =
        `Action=GetCallerIdentity&Version=2011-06-15&X-Amz-Algorithm=AWS4-HMAC-SHA256` +
        `&X-Amz-Credential=${encodeURIComponent(`${scope.accessKeyId}/${scope.date}/${scope.region}/sts/aws4_request`)}` +
        `&X-Amz-Date=${amzDate}&X-Amz-Expires=60&X-Amz-SignedHeaders=host%3Bx-kops-request-sha`;
      const headers = { host, 'x-kops-request-sha': 'Ym9keQ' };
      const canonical = canonicalRequest(
        { method: 'GET', url: `/?${query}`, headers, body: '' },
        ['host', 'x-kops-request-sha'],
        true,
      );
      const url = `/?${query}&X-Amz-Signature=${computeSignature(canonical, amzDate, scope, sim.credentials.secretAccessKey)}`;
      const ok = await fetch(`${sim.endpoint}${url}`, { headers: { 'x-kops-request-sha': 'Ym9keQ' } });
      assert.equal(ok.status, 200);
      assert.match(await ok.text(), /<Account>123456789012<\/Account>/);
      const tampered = await fetch(`${sim.endpoint}${url}`, { headers: { 'x-kops-request-sha': 'b3RoZXI' } });
      assert.equal(tampered.status, 403);
    });

    it('rejects a request signed for another region', async () => {
      const sts = new STSClient({
        region: 'eu-west-1',
        endpoint: sim.endpoint,
        credentials: sim.credentials,
        maxAttempts: 1,
      });
      assert.deepEqual(await rejection(sts.send(new GetCallerIdentityCommand({}))), {
        name: 'SignatureDoesNotMatch',
        status: 403,
      });
      sts.destroy();
    });
  });

  it('answers malformed requests with a 4xx error document and keeps serving', async () => {
    const cases: [string, RequestInit][] = [
      ['/?%zz', {}],
      ['/', { headers: { authorization: 'AWS4-HMAC-SHA256 Credential=x' } }],
      [
        '/',
        {
          method: 'POST',
          headers: {
            authorization:
              'AWS4-HMAC-SHA256 Credential=a/b/c/d/aws4_request, SignedHeaders=host, Signature=00',
            'x-amz-date': 'yesterday',
          },
        },
      ],
      ['/?Action=DescribeInstances', { headers: { authorization: 'Bearer abc' } }],
      ['/', { method: 'POST', body: 'x'.repeat(1024 * 1024 + 1) }],
    ];
    for (const [path, init] of cases) {
      const response = await fetch(`${sim.endpoint}${path}`, init).catch(() => undefined);
      if (response === undefined) continue; // the oversized upload may be cut off mid-request
      assert.ok(response.status >= 400 && response.status < 500, `${path}: HTTP ${response.status}`);
      assert.match(await response.text(), /<Code>[A-Za-z.]+<\/Code>/);
    }
    const me = await clients.sts.send(new GetCallerIdentityCommand({}));
    assert.equal(me.Account, sim.account);
  });

  it('answers AuthFailure to EC2 calls with a wrong key', async () => {
    const ec2 = new EC2Client({
      region: sim.region,
      endpoint: sim.endpoint,
      credentials: { ...sim.credentials, secretAccessKey: 'x' },
      maxAttempts: 1,
    });
    assert.deepEqual(await rejection(ec2.send(new DescribeInstancesCommand({}))), {
      name: 'AuthFailure',
      status: 401,
    });
    ec2.destroy();
  });

  it('injects faults per service: an error document for the next N calls, or a dropped connection', async () => {
    const id = clusterInstances({ cluster, instanceGroup: 'nodes', count: 1 })[0]?.id as string;
    const describe = () => clients.ec2.send(new DescribeInstancesCommand({ InstanceIds: [id] }));
    const whoAmI = () => clients.sts.send(new GetCallerIdentityCommand({}));
    sim.faults.add({ service: 'sts', count: 1, error: { code: 'Throttling', status: 400 } });
    sim.faults.add({ service: 'ec2', count: 2, error: { code: 'RequestLimitExceeded', status: 503 } });
    try {
      assert.deepEqual(await rejection(whoAmI()), { name: 'Throttling', status: 400 });
      assert.ok((await whoAmI()).Arn, 'one STS fault only');
      for (let i = 0; i < 2; i++)
        assert.deepEqual(await rejection(describe()), { name: 'RequestLimitExceeded', status: 503 });
      assert.equal((await describe()).Reservations?.length, 1, 'EC2 answers again after its count');
      sim.faults.add({ service: 'sts', drop: true });
      const dropped = await rejection(whoAmI());
      assert.equal(dropped.status, undefined, `no answer at all: ${dropped.name}`);
    } finally {
      sim.faults.reset();
    }
    assert.ok((await whoAmI()).Arn, 'reset removes every fault');
  });

  it('throttles EC2 with RequestLimitExceeded once the bucket is empty, and counts calls', async () => {
    // A frozen clock: the bucket does not refill, so exactly its capacity is served.
    const frozen = new Date();
    const throttled = await startAwsSimulator({ now: () => frozen });
    throttled.ec2.addInstances([{ id: simInstanceId(1), zone: 'us-east-1a' }]);
    const ec2 = new EC2Client({
      region: throttled.region,
      endpoint: throttled.endpoint,
      credentials: throttled.credentials,
      maxAttempts: 1,
    });
    try {
      const results = await Promise.allSettled(
        Array.from({ length: 110 }, () =>
          ec2.send(new DescribeInstancesCommand({ InstanceIds: [simInstanceId(1)] })),
        ),
      );
      const refused = results.filter((r) => r.status === 'rejected');
      assert.equal(refused.length, 10);
      for (const r of refused) {
        assert.equal((r.reason as Error).name, 'RequestLimitExceeded');
        assert.equal((r.reason as { $metadata: { httpStatusCode: number } }).$metadata.httpStatusCode, 503);
      }
      assert.equal(throttled.calls.count('DescribeInstances'), 100);
      assert.equal(throttled.calls.throttled('DescribeInstances'), 10);
      throttled.throttling.enabled = false;
      await ec2.send(new DescribeInstancesCommand({ InstanceIds: [simInstanceId(1)] }));
      assert.equal(
        throttled.calls.count('DescribeInstances'),
        101,
        'switched off, the bucket no longer refuses',
      );
    } finally {
      ec2.destroy();
      await throttled.close();
    }
  });
});
