/**
 * EC2 answering wrongly, over real HTTP (the AWS simulator with its answers rewritten): a NextToken
 * that repeats, the same instance twice with different tags, an instance group tag kops never
 * writes. None may loop, or give a node a wrong group.
 */
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { KopsError } from '../../errors.ts';
import { clusterInstances } from '../../sim/aws/scenario.ts';
import { type AwsSimulator, startAwsSimulator } from '../../sim/aws/server.ts';
import type { IdentifyResult } from '../types.ts';
import { type AwsClients, createAwsClients } from './clients.ts';
import { AwsNodeIdentifier } from './identify.ts';

const cluster = 'prod.example.com';

function errorOf(result: IdentifyResult | undefined): KopsError {
  assert.ok(result && !result.ok, `expected a refusal, got ${JSON.stringify(result)}`);
  assert.ok(result.error instanceof KopsError, String(result.error));
  return result.error;
}

describe('EC2 answers that are wrong', () => {
  let sim: AwsSimulator;
  let clients: AwsClients;
  let identifier: AwsNodeIdentifier;
  const id = 'i-0c0000000000000c1';
  const providerID = `aws:///us-east-1a/${id}`;

  before(async () => {
    sim = await startAwsSimulator({});
    sim.ec2.addInstances([
      ...clusterInstances({ cluster, instanceGroup: 'nodes', count: 3, zones: ['us-east-1a'] }),
      { id, zone: 'us-east-1a', cluster, instanceGroup: 'nodes' },
    ]);
    clients = await createAwsClients({
      region: sim.region,
      endpoint: sim.endpoint,
      credentials: sim.credentials,
    });
  });
  beforeEach(() => {
    identifier = new AwsNodeIdentifier({ ec2: clients.ec2, clusterName: cluster });
    sim.faults.reset();
    sim.calls.reset();
  });
  after(async () => {
    clients.destroy();
    await sim.close();
  });

  it('a DescribeInstances NextToken that repeats ends with a fault, not a loop', async () => {
    // A proxy answering the first page again and again, always with the same NextToken.
    let first: string | undefined;
    sim.faults.add({
      service: 'ec2',
      count: 3_000,
      rewrite: (xml) => {
        first ??= xml.replace(
          '</DescribeInstancesResponse>',
          '<nextToken>same</nextToken></DescribeInstancesResponse>',
        );
        return { status: 200, xml: first };
      },
    });
    const error = errorOf((await identifier.identify([providerID])).get(providerID));
    assert.equal(error.kind, 'unavailable', error.message);
    assert.ok(sim.calls.count('DescribeInstances') <= 3, `${sim.calls.count('DescribeInstances')} calls`);
  });

  it('the same instance listed twice with different instance groups is refused, and not cached', async () => {
    sim.faults.add({
      service: 'ec2',
      count: 2,
      rewrite: (xml) => {
        const set = /<reservationSet>([\s\S]*)<\/reservationSet>/.exec(xml)?.[1] ?? '';
        const other = set.replace('<value>nodes</value>', '<value>control-plane-us-east-1a</value>');
        return xml.replace(set, set + other);
      },
    });
    for (let i = 0; i < 2; i++) {
      const error = errorOf((await identifier.identify([providerID], { maxAgeMs: 0 })).get(providerID));
      assert.equal(error.kind, 'unavailable', error.message);
    }
    assert.equal(sim.calls.count('DescribeInstances'), 2);
  });

  it('an instance group tag that is no kops name is refused with a reason', async () => {
    sim.faults.add({
      service: 'ec2',
      count: 1,
      rewrite: (xml) => xml.replace('<value>nodes</value>', '<value>../../config</value>'),
    });
    const error = errorOf((await identifier.identify([providerID])).get(providerID));
    assert.equal(error.details?.['reason'], 'invalid-instance-group', error.message);
  });
});
