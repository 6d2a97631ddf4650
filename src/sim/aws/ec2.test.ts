import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { describeInstances, describeLaunchTemplates, ec2ErrorDocument } from './ec2.ts';
import { AwsSimError } from './query.ts';
import { simLaunchTemplateId } from './scenario.ts';
import { AwsWorld } from './world.ts';

function world(): AwsWorld {
  const w = new AwsWorld('111122223333', 'us-east-1');
  w.addInstances([
    { id: 'i-00000001', zone: 'us-east-1a', cluster: 'c', instanceGroup: 'nodes', lifecycle: 'spot' },
    { id: 'i-00000002', zone: 'us-east-1b', cluster: 'c', instanceGroup: 'control-plane', state: 'stopped' },
  ]);
  return w;
}

function code(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof AwsSimError);
    return err.code;
  }
  assert.fail('expected an AWS error');
}

describe('simulated DescribeInstances', () => {
  it('renders instances in EC2 XML', () => {
    const xml = describeInstances(world(), new Map([['InstanceId.1', 'i-00000001']]));
    assert.match(
      xml,
      /^<\?xml version="1.0" encoding="UTF-8"\?>\n<DescribeInstancesResponse xmlns="http:\/\/ec2\.amazonaws\.com\/doc\/2016-11-15\/">/,
    );
    assert.match(xml, /<instanceState><code>16<\/code><name>running<\/name><\/instanceState>/);
    assert.match(xml, /<instanceLifecycle>spot<\/instanceLifecycle>/);
    assert.match(xml, /<item><key>kops\.k8s\.io\/instancegroup<\/key><value>nodes<\/value><\/item>/);
    assert.doesNotMatch(xml, /i-00000002/);
    assert.doesNotMatch(xml, /<nextToken>/);
  });

  it('renders the IPv6 prefixes delegated to the primary ENI and to secondary ENIs', () => {
    const w = new AwsWorld('111122223333', 'us-east-1');
    w.addInstances([
      {
        id: 'i-00000003',
        zone: 'us-east-1a',
        ipv6Prefixes: ['2001:db8:0:1:3::/80'],
        secondaryNetworkInterfaces: [{ ipv6Prefixes: ['2001:db8:0:2:3::/80'] }],
      },
    ]);
    const xml = describeInstances(w, new Map([['InstanceId.1', 'i-00000003']]));
    assert.match(
      xml,
      /<networkInterfaceId>eni-00000003<\/networkInterfaceId>.*<ipv6PrefixSet><item><ipv6Prefix>2001:db8:0:1:3::\/80<\/ipv6Prefix><\/item><\/ipv6PrefixSet><attachment><deviceIndex>0<\/deviceIndex>/,
    );
    assert.match(
      xml,
      /<networkInterfaceId>eni-00000003-1<\/networkInterfaceId><ipv6PrefixSet><item><ipv6Prefix>2001:db8:0:2:3::\/80<\/ipv6Prefix><\/item><\/ipv6PrefixSet><attachment><deviceIndex>1<\/deviceIndex>/,
    );
  });

  it('filters by availability zone, lifecycle and state', () => {
    const w = world();
    const ids = (params: [string, string][]) =>
      [...describeInstances(w, new Map(params)).matchAll(/<instanceId>(i-\w+)</g)].map((m) => m[1]);
    assert.deepEqual(
      ids([
        ['Filter.1.Name', 'availability-zone'],
        ['Filter.1.Value.1', 'us-east-1b'],
      ]),
      ['i-00000002'],
    );
    assert.deepEqual(
      ids([
        ['Filter.1.Name', 'instance-lifecycle'],
        ['Filter.1.Value.1', 'spot'],
      ]),
      ['i-00000001'],
    );
    assert.deepEqual(
      ids([
        ['Filter.1.Name', 'instance-state-code'],
        ['Filter.1.Value.1', '80'],
      ]),
      ['i-00000002'],
    );
  });

  it('names every missing id in one NotFound error', () => {
    try {
      describeInstances(
        world(),
        new Map([
          ['InstanceId.1', 'i-0000000a'],
          ['InstanceId.2', 'i-00000001'],
          ['InstanceId.3', 'i-0000000b'],
        ]),
      );
      assert.fail('expected NotFound');
    } catch (err) {
      assert.ok(err instanceof AwsSimError);
      assert.equal(err.code, 'InvalidInstanceID.NotFound');
      assert.equal(err.message, "The instance IDs 'i-0000000a, i-0000000b' do not exist");
    }
  });

  it('refuses what EC2 refuses', () => {
    const w = world();
    assert.equal(
      code(() =>
        describeInstances(
          w,
          new Map([
            ['InstanceId.1', 'i-00000001'],
            ['MaxResults', '5'],
          ]),
        ),
      ),
      'InvalidParameterCombination',
    );
    assert.equal(
      code(() => describeInstances(w, new Map([['InstanceId.1', 'nope']]))),
      'InvalidInstanceID.Malformed',
    );
    assert.equal(
      code(() =>
        describeInstances(
          w,
          new Map([
            ['Filter.1.Name', 'vpc-magic'],
            ['Filter.1.Value.1', 'x'],
          ]),
        ),
      ),
      'InvalidParameterValue',
    );
    const many = new Map(
      Array.from({ length: 1001 }, (_, i) => [`InstanceId.${i + 1}`, 'i-00000001'] as [string, string]),
    );
    assert.equal(
      code(() => describeInstances(w, many)),
      'InvalidParameterValue',
    );
  });

  it('writes EC2 error documents', () => {
    assert.match(
      ec2ErrorDocument('AuthFailure', 'no'),
      /^<\?xml[^>]*>\n<Response><Errors><Error><Code>AuthFailure<\/Code><Message>no<\/Message><\/Error><\/Errors><RequestID>/,
    );
  });
});

describe('simulated DescribeLaunchTemplates', () => {
  const w = new AwsWorld('111122223333', 'us-east-1');
  const [a, b, c] = [1, 2, 3].map(simLaunchTemplateId) as [string, string, string];
  w.addLaunchTemplate({
    id: a,
    name: 'nodes.c',
    latestVersion: 5,
    defaultVersion: 3,
    tags: { KubernetesCluster: 'c' },
  });
  w.addLaunchTemplate({ id: b, name: 'control-plane.c', tags: { KubernetesCluster: 'c' } });
  w.addLaunchTemplate({ id: c, name: 'nodes.d', tags: { KubernetesCluster: 'd' } });
  const ids = (xml: string) => [...xml.matchAll(/<launchTemplateId>([^<]+)</g)].map((m) => m[1]);

  it('renders the latest and default version numbers in EC2 XML', () => {
    const xml = describeLaunchTemplates(w, new Map([['LaunchTemplateId.1', a]]));
    assert.match(
      xml,
      /^<\?xml[^>]*>\n<DescribeLaunchTemplatesResponse xmlns="http:\/\/ec2\.amazonaws\.com\/doc\/2016-11-15\/">/,
    );
    assert.match(
      xml,
      new RegExp(
        `<launchTemplates><item><createTime>[^<]+</createTime><createdBy>arn:aws:iam::111122223333:root</createdBy><defaultVersionNumber>3</defaultVersionNumber><latestVersionNumber>5</latestVersionNumber><launchTemplateId>${a}</launchTemplateId><launchTemplateName>nodes.c</launchTemplateName>`,
      ),
    );
    assert.match(xml, /<tagSet><item><key>KubernetesCluster<\/key><value>c<\/value><\/item><\/tagSet>/);
  });

  it('selects by id, name, name filter and tag; pages by MaxResults', () => {
    assert.deepEqual(ids(describeLaunchTemplates(w, new Map())), [a, b, c]);
    assert.deepEqual(
      ids(
        describeLaunchTemplates(
          w,
          new Map([
            ['LaunchTemplateId.1', c],
            ['LaunchTemplateName.1', 'nodes.c'],
          ]),
        ),
      ),
      [c, a],
    );
    assert.deepEqual(
      ids(
        describeLaunchTemplates(
          w,
          new Map([
            ['Filter.1.Name', 'launch-template-name'],
            ['Filter.1.Value.1', 'nodes.*'],
            ['Filter.2.Name', 'tag:KubernetesCluster'],
            ['Filter.2.Value.1', 'c'],
          ]),
        ),
      ),
      [a],
    );
    const first = describeLaunchTemplates(w, new Map([['MaxResults', '2']]));
    const token = /<nextToken>([^<]+)<\/nextToken>/.exec(first)?.[1];
    assert.deepEqual(ids(first), [a, b]);
    assert.ok(token);
    assert.deepEqual(
      ids(
        describeLaunchTemplates(
          w,
          new Map([
            ['MaxResults', '2'],
            ['NextToken', token],
          ]),
        ),
      ),
      [c],
    );
  });

  it('refuses unknown and malformed templates, unknown filters and sizes as EC2 does', () => {
    assert.equal(
      code(() => describeLaunchTemplates(w, new Map([['LaunchTemplateId.1', simLaunchTemplateId(9)]]))),
      'InvalidLaunchTemplateId.NotFound',
    );
    assert.equal(
      code(() => describeLaunchTemplates(w, new Map([['LaunchTemplateId.1', 'lt-nope']]))),
      'InvalidLaunchTemplateId.Malformed',
    );
    assert.equal(
      code(() => describeLaunchTemplates(w, new Map([['LaunchTemplateName.1', 'gone']]))),
      'InvalidLaunchTemplateName.NotFoundException',
    );
    assert.equal(
      code(() =>
        describeLaunchTemplates(
          w,
          new Map([
            ['Filter.1.Name', 'bogus'],
            ['Filter.1.Value.1', 'x'],
          ]),
        ),
      ),
      'InvalidParameterValue',
    );
    assert.equal(
      code(() => describeLaunchTemplates(w, new Map([['MaxResults', '201']]))),
      'InvalidParameterValue',
    );
  });
});
