import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import fc from 'fast-check';
import { signAwsStsProof } from '../../agent/aws-proof.ts';
import { createAwsClients } from '../../cloud/aws/clients.ts';
import { AwsNodeIdentifier } from '../../cloud/aws/identify.ts';
import type { SigV4Credentials } from '../../cloud/aws/sigv4.ts';
import { KopsError } from '../../errors.ts';
import type { AwsFault } from '../../sim/aws/faults.ts';
import { type AwsSimulator, startAwsSimulator } from '../../sim/aws/server.ts';
import { testRequest } from '../../testing/bootstrap-request.ts';
import type { BootstrapPolicy, PolicyContext } from '../types.ts';
import { type AwsPolicyOptions, awsPolicy, checkCaller, ipBasedNodeName } from './aws.ts';

const cluster = 'test.example.com';
const instanceId = 'i-0123456789abcdef0';
const foreignInstance = 'i-0fedcba9876543210';
let sim: AwsSimulator;
let identifier: AwsNodeIdentifier;
let ec2: Awaited<ReturnType<typeof createAwsClients>>['ec2'];
let destroy: () => void;
let nodeCredentials: SigV4Credentials;
const now: PolicyContext = { now: () => new Date() };

before(async () => {
  sim = await startAwsSimulator({ throttling: false });
  sim.ec2.addInstances([
    { id: instanceId, zone: 'us-east-1a', cluster, instanceGroup: 'nodes-us-east-1a', privateIp: '10.1.2.3' },
    { id: foreignInstance, zone: 'us-east-1a', cluster: 'other.example.com', instanceGroup: 'nodes' },
  ]);
  nodeCredentials = sim.sts.addInstanceProfileSession(`nodes.${cluster}`, instanceId);
  const clients = await createAwsClients({
    region: sim.region,
    endpoint: sim.endpoint,
    credentials: sim.credentials,
    maxAttempts: 1,
  });
  destroy = () => clients.destroy();
  ec2 = clients.ec2;
  identifier = new AwsNodeIdentifier({ ec2: clients.ec2, clusterName: cluster, batchWindowMs: 1 });
});

after(async () => {
  destroy();
  await sim.close();
});

function policy(overrides: Partial<AwsPolicyOptions> = {}): BootstrapPolicy {
  return awsPolicy({
    account: sim.account,
    partition: 'aws',
    region: sim.region,
    nodesRoles: [`nodes.${cluster}`],
    instances: identifier,
    stsEndpoint: sim.endpoint,
    ...overrides,
  });
}

function signedRequest(
  body: string,
  version: 1 | 2 = 1,
  options: { signedBody?: string; at?: Date; credentials?: SigV4Credentials } = {},
) {
  const header = signAwsStsProof(
    options.signedBody ?? body,
    options.credentials ?? nodeCredentials,
    sim.region,
    version,
    { now: options.at ?? new Date() },
  );
  const [prefix, token] = header.split(' ') as [string, string];
  assert.equal(prefix, version === 1 ? 'x-aws-sts' : 'x-aws-sts-v2');
  return testRequest({ body: Buffer.from(body), proof: { kind: 'aws-sts', version, token } });
}

test('aws approves a v1 proof: node name, SANs and group from EC2', async () => {
  const decision = await policy().evaluate(signedRequest('{"a":1}'), now);
  assert.ok(decision.verdict === 'approve', JSON.stringify(decision));
  assert.equal(decision.facts.nodeName, instanceId);
  assert.equal(decision.facts.instanceGroup, 'nodes-us-east-1a');
  assert.deepEqual(decision.facts.ipAddresses, ['10.1.2.3']);
  // kops' certificate names: the instance id and the private DNS name, whichever names the node.
  assert.ok(decision.facts.dnsNames.includes('ip-10-1-2-3.ec2.internal'));
  assert.ok(decision.facts.dnsNames.includes(instanceId));
  assert.equal(
    decision.facts.evidence['arn'],
    `arn:aws:sts::${sim.account}:assumed-role/nodes.${cluster}/${instanceId}`,
  );
  assert.equal(decision.facts.evidence['account'], sim.account);
  // Its certificates name the instance (the incarnation extension): a renewal is bound to it.
  assert.equal(decision.facts.incarnationId, instanceId);
});

test('aws approves a v2 (presigned) proof, with IP-based node names when configured', async () => {
  const decision = await policy({ useIPBasedNodeNames: true }).evaluate(signedRequest('{"b":2}', 2), now);
  assert.ok(decision.verdict === 'approve', JSON.stringify(decision));
  assert.equal(decision.facts.nodeName, 'ip-10-1-2-3.ec2.internal');
  assert.ok(decision.facts.dnsNames.includes(instanceId));
  assert.ok(decision.facts.dnsNames.includes('ip-10-1-2-3.ec2.internal'));
  // The name is the address's, which another instance may hold later: the certificates name this one.
  assert.equal(decision.facts.incarnationId, instanceId);
});

test('aws abstains on a request without an AWS proof', async () => {
  const decision = await policy().evaluate(testRequest(), now);
  assert.equal(decision.verdict, 'abstain');
});

test('the same request presented again with its proof is answered again (its retry); the proof passes with no other body', async () => {
  const p = policy();
  const request = signedRequest('{"c":3}');
  assert.equal((await p.evaluate(request, now)).verdict, 'approve');
  const again = await p.evaluate(request, now);
  assert.equal(again.verdict, 'approve', JSON.stringify(again));
  const moved = await p.evaluate({ ...request, body: Buffer.from('{"c":4}') }, now);
  assert.equal(moved.verdict, 'deny');
  assert.match(moved.reasons[0] ?? '', /signed for another request/);
});

test('attack: a captured proof presented with other bodies to two replicas at once is refused by both, which share nothing', async () => {
  const [first, second] = [policy(), policy()];
  const captured = signedRequest('{"kubelet":"node keys"}', 2);
  const before = sim.calls.count('GetCallerIdentity');
  const decisions = await Promise.all(
    ['{"kubelet":"attacker keys"}', '{"kubelet": "node keys"}', '{"kubelet":"node keys"}\n'].flatMap((body) =>
      [first, second].map((replica) => replica.evaluate({ ...captured, body: Buffer.from(body) }, now)),
    ),
  );
  for (const decision of decisions) {
    assert.equal(decision.verdict, 'deny', JSON.stringify(decision));
    assert.match(decision.reasons[0] ?? '', /signed for another request/);
  }
  assert.equal(sim.calls.count('GetCallerIdentity'), before, 'refused before STS is asked');
  assert.equal((await second.evaluate(captured, now)).verdict, 'approve', 'the node itself still joins');
});

test('a spent-proof marker could refuse nothing the policy approves: the binding already refuses every other body', async () => {
  // The marker rule this policy no longer writes: a signature spent on one body is refused with any
  // other. Random presentations of a few proofs with their own and each other's bodies, v1 and v2.
  const bodies = ['{"a":1}', '{"a":2}', '{"a":1} ', '{"b":1}'];
  const proofs = bodies.flatMap((body) => [signedRequest(body, 1), signedRequest(body, 2)]);
  // Its own EC2 call budget: the file's identifier would make the many approvals wait for calls.
  const callBudget = { burst: 10_000, perSecond: 10_000 };
  const instances = new AwsNodeIdentifier({ ec2, clusterName: cluster, batchWindowMs: 1, callBudget });
  await fc.assert(
    fc.asyncProperty(
      fc.array(fc.record({ proof: fc.nat(proofs.length - 1), body: fc.nat(bodies.length - 1) }), {
        minLength: 1,
        maxLength: 12,
      }),
      async (presentations) => {
        const spentOn = new Map<string, string>();
        const p = policy({ instances });
        for (const { proof, body } of presentations) {
          const request = {
            ...(proofs[proof] as (typeof proofs)[number]),
            body: Buffer.from(bodies[body] as string),
          };
          const decision = await p.evaluate(request, now);
          const own = Math.floor(proof / 2) === body;
          assert.equal(decision.verdict, own ? 'approve' : 'deny', JSON.stringify(decision));
          if (decision.verdict !== 'approve') continue;
          const key = request.proof.kind === 'aws-sts' ? request.proof.token : '';
          const spent = spentOn.get(key);
          assert.ok(spent === undefined || spent === bodies[body], 'a marker would have refused this');
          spentOn.set(key, bodies[body] as string);
        }
      },
    ),
    { numRuns: 25 },
  );
});

/** Asserts a dependency fault naming `dependency`: the node gets 503 and retries, never a denial. */
function faultOf(dependency: string) {
  return (err: unknown) => {
    assert.ok(err instanceof KopsError, String(err));
    assert.equal(err.kind, 'unavailable', err.message);
    assert.equal(err.details?.['reason'], 'dependency-unavailable', err.message);
    assert.equal(err.details?.['dependency'], dependency, err.message);
    return true;
  };
}

test('STS unreachable, dropping the connection, slow, throttled or failing: a dependency fault, never a denial', async () => {
  await assert.rejects(
    policy({ stsEndpoint: 'http://127.0.0.1:1' }).evaluate(signedRequest('{"s":1}'), now),
    faultOf('sts'),
    'unreachable',
  );
  const faults: [string, AwsFault][] = [
    ['dropped', { service: 'sts', count: 1, drop: true }],
    ['slow', { service: 'sts', count: 1, latencyMs: 1_500 }],
    ['throttled', { service: 'sts', count: 1, error: { code: 'Throttling', status: 400 } }],
    ['5xx', { service: 'sts', count: 1, error: { code: 'ServiceUnavailable', status: 503 } }],
  ];
  for (const [what, fault] of faults) {
    sim.faults.add(fault);
    await assert.rejects(
      policy({ stsTimeoutMs: 300 }).evaluate(signedRequest(`{"s":"${what}"}`), now),
      faultOf('sts'),
      what,
    );
  }
  sim.faults.reset();
});

test('EC2 throttled beyond the SDK retries, or failing: a dependency fault; the retry of the same request then passes', async () => {
  const p = policy();
  const request = signedRequest('{"e":1}');
  sim.faults.add({ service: 'ec2', count: 1, error: { code: 'RequestLimitExceeded', status: 503 } });
  await assert.rejects(p.evaluate(request, now), faultOf('ec2'), 'throttled');
  sim.faults.add({ service: 'ec2', count: 1, error: { code: 'InternalError', status: 500 } });
  await assert.rejects(p.evaluate(request, now), faultOf('ec2'), '5xx');
  // The proof was spent before EC2 failed: the same request, retried, is not a replay.
  const retried = await p.evaluate(request, now);
  assert.equal(retried.verdict, 'approve', JSON.stringify(retried));
});

test('EC2 slower than the lookup deadline: a dependency fault, not a request held until the node gives up', async () => {
  sim.faults.add({ service: 'ec2', count: 1, latencyMs: 2_000 });
  try {
    await assert.rejects(
      policy({ lookupTimeoutMs: 200 }).evaluate(signedRequest('{"slow":"ec2"}'), now),
      faultOf('ec2'),
    );
  } finally {
    sim.faults.reset();
  }
});

test('attack: token signed for another body is denied before STS is asked', async () => {
  const before = sim.calls.count('GetCallerIdentity');
  const decision = await policy().evaluate(signedRequest('{"evil":1}', 1, { signedBody: '{"good":1}' }), now);
  assert.equal(decision.verdict, 'deny');
  assert.match(decision.reasons[0] ?? '', /signed for another request/);
  assert.equal(sim.calls.count('GetCallerIdentity'), before);
});

test('attack: stale signature (older than the window, still within STS skew) is denied', async () => {
  const at = new Date(Date.now() - 10 * 60 * 1000);
  const decision = await policy().evaluate(signedRequest('{"d":4}', 1, { at }), now);
  assert.equal(decision.verdict, 'deny');
  assert.match(
    decision.reasons[0] ?? '',
    /, 60\d s ago; proofs are accepted within 300 s .*check the node's clock/,
  );
});

test('a signature dated beyond the window in the future is denied, saying how far ahead the node is', async () => {
  const at = new Date(Date.now() + 330 * 1000);
  const decision = await policy().evaluate(signedRequest('{"d":5}', 1, { at }), {
    now: () => new Date(at.getTime() - 330_000),
  });
  assert.equal(decision.verdict, 'deny');
  assert.match(
    decision.reasons[0] ?? '',
    /, 3[23]\d s in the future; proofs are accepted within 300 s .*check the node's clock/,
  );
});

test('attack: wrong account is denied', async () => {
  const decision = await policy({ account: '111122223333' }).evaluate(signedRequest('{"e":5}'), now);
  assert.equal(decision.verdict, 'deny');
  assert.match(decision.reasons[0] ?? '', /account 111122223333|this cluster's account 111122223333/);
});

test('attack: role not in the allow-list is denied', async () => {
  const credentials = sim.sts.addInstanceProfileSession('masters.test.example.com', instanceId);
  const decision = await policy().evaluate(signedRequest('{"f":6}', 1, { credentials }), now);
  assert.equal(decision.verdict, 'deny');
  assert.match(decision.reasons[0] ?? '', /role masters\.test\.example\.com is not one of the node roles/);
});

test('attack: instance of another cluster is denied', async () => {
  const credentials = sim.sts.addInstanceProfileSession(`nodes.${cluster}`, foreignInstance);
  const decision = await policy().evaluate(signedRequest('{"g":7}', 1, { credentials }), now);
  assert.equal(decision.verdict, 'deny');
  assert.match(decision.reasons[0] ?? '', /does not belong to cluster test\.example\.com/);
});

test('attack: an IAM user (not an instance session) is denied', async () => {
  const decision = await policy().evaluate(
    signedRequest('{"h":8}', 1, { credentials: sim.credentials }),
    now,
  );
  assert.equal(decision.verdict, 'deny');
  assert.match(decision.reasons[0] ?? '', /not an STS session|not an assumed-role/);
});

test('attack: a forged signature is refused by STS', async () => {
  const forged = { ...nodeCredentials, secretAccessKey: 'not-the-secret' };
  const decision = await policy().evaluate(signedRequest('{"i":9}', 1, { credentials: forged }), now);
  assert.equal(decision.verdict, 'deny');
  assert.match(decision.reasons[0] ?? '', /SignatureDoesNotMatch/);
});

test('malformed proofs are denied, never thrown', async () => {
  for (const token of [
    '',
    '!!!',
    Buffer.from('[]').toString('base64'),
    Buffer.from('{"Authorization":"x"}').toString('base64'),
  ]) {
    for (const version of [1, 2] as const) {
      const decision = await policy().evaluate(
        testRequest({ proof: { kind: 'aws-sts', version, token } }),
        now,
      );
      assert.equal(decision.verdict, 'deny', token);
    }
  }
});

test('checkCaller and ipBasedNodeName', () => {
  const options = { account: '123456789012', partition: 'aws', nodesRoles: ['nodes'] };
  assert.deepEqual(
    checkCaller(
      {
        account: '123456789012',
        arn: `arn:aws:sts::123456789012:assumed-role/nodes/${instanceId}`,
        userId: '',
      },
      options,
    ),
    { role: 'nodes', instanceId },
  );
  assert.match(
    String(
      checkCaller(
        {
          account: '123456789012',
          arn: 'arn:aws-cn:sts::123456789012:assumed-role/nodes/i-01234567',
          userId: '',
        },
        options,
      ),
    ),
    /not an STS session/,
  );
  assert.match(
    String(
      checkCaller(
        { account: '123456789012', arn: 'arn:aws:sts::123456789012:assumed-role/nodes/laptop', userId: '' },
        options,
      ),
    ),
    /not named after an EC2 instance/,
  );
  assert.equal(ipBasedNodeName('10.0.0.1', 'eu-west-1'), 'ip-10-0-0-1.eu-west-1.compute.internal');
});

test('attack: credentials of an instance terminated since its last bootstrap are refused (EC2 asked each time)', async () => {
  const id = 'i-0aaaaaaaaaaaaaaaa';
  sim.ec2.addInstances([{ id, zone: 'us-east-1b', cluster, instanceGroup: 'nodes-us-east-1b' }]);
  const credentials = sim.sts.addInstanceProfileSession(`nodes.${cluster}`, id);
  const p = policy();
  assert.equal((await p.evaluate(signedRequest('{"j":1}', 1, { credentials }), now)).verdict, 'approve');
  sim.ec2.setInstanceState(id, 'terminated');
  const decision = await p.evaluate(signedRequest('{"j":2}', 1, { credentials }), now);
  assert.equal(decision.verdict, 'deny');
  assert.match(decision.reasons[0] ?? '', /terminated/);
});

test('an instance EC2 does not list yet (its API is eventually consistent): a dependency fault while it may still appear, then approved; denied once the grace has passed', async () => {
  const id = 'i-0bbbbbbbbbbbbbbbb';
  sim.ec2.addInstances([{ id, zone: 'us-east-1b', cluster, instanceGroup: 'nodes-us-east-1b' }]);
  const credentials = sim.sts.addInstanceProfileSession(`nodes.${cluster}`, id);
  let clock = Date.now();
  const at: PolicyContext = { now: () => new Date(clock) };
  // An identifier of its own: the file's has spent its call budget, and each lookup would wait 3 s.
  const instances = new AwsNodeIdentifier({
    ec2,
    clusterName: cluster,
    batchWindowMs: 1,
    callBudget: { burst: 100, perSecond: 100 },
  });
  const p = policy({ notFoundGraceMs: 120_000, instances, monotonic: () => clock });
  // STS vouches for the session of instance `id`; EC2 answers NotFound for its next two lookups.
  sim.ec2.propagate(id, 2);
  await assert.rejects(p.evaluate(signedRequest('{"k":1}', 1, { credentials }), at), faultOf('ec2'));
  clock += 30_000;
  await assert.rejects(p.evaluate(signedRequest('{"k":2}', 1, { credentials }), at), faultOf('ec2'));
  clock += 30_000;
  const approved = await p.evaluate(signedRequest('{"k":3}', 1, { credentials }), at);
  assert.equal(approved.verdict, 'approve', JSON.stringify(approved));

  // An instance EC2 keeps not listing: past the grace, counted from its first NotFound, a denial.
  const ghost = 'i-0cccccccccccccccc';
  const ghostCredentials = sim.sts.addInstanceProfileSession(`nodes.${cluster}`, ghost);
  await assert.rejects(
    p.evaluate(signedRequest('{"l":1}', 1, { credentials: ghostCredentials }), at),
    faultOf('ec2'),
  );
  clock += 119_000;
  await assert.rejects(
    p.evaluate(signedRequest('{"l":2}', 1, { credentials: ghostCredentials }), at),
    faultOf('ec2'),
  );
  clock += 1_000;
  const denied = await p.evaluate(signedRequest('{"l":3}', 1, { credentials: ghostCredentials }), at);
  assert.equal(denied.verdict, 'deny');
  assert.match(denied.reasons[0] ?? '', /EC2 does not vouch for i-0cccccccccccccccc.*no instance/);
});

test('the grace for an instance EC2 does not list yet is timed on the monotonic clock: a wall clock stepped forward does not end it, nor one stepped back prolong it', async () => {
  const id = 'i-0dddddddddddddddd';
  const credentials = sim.sts.addInstanceProfileSession(`nodes.${cluster}`, id);
  const real = Date.now();
  let wall = real;
  let monotonic = 0;
  const at: PolicyContext = { now: () => new Date(wall) };
  const instances = new AwsNodeIdentifier({
    ec2,
    clusterName: cluster,
    batchWindowMs: 1,
    callBudget: { burst: 100, perSecond: 100 },
  });
  const p = policy({ notFoundGraceMs: 120_000, instances, monotonic: () => monotonic });
  // Signed on the node's (true) clock, which STS checks too.
  const signed = (n: number) => signedRequest(`{"m":${n}}`, 1, { credentials });
  await assert.rejects(p.evaluate(signed(1), at), faultOf('ec2'));
  wall += 4 * 60_000; // NTP steps the clock four minutes forward (past the grace); ten seconds pass
  monotonic += 10_000;
  await assert.rejects(p.evaluate(signed(2), at), faultOf('ec2'), 'still within the grace');
  wall = real; // and back; the grace runs out
  monotonic += 110_000;
  const denied = await p.evaluate(signed(3), at);
  assert.equal(denied.verdict, 'deny', JSON.stringify(denied));
});
