import assert from 'node:assert/strict';
import { after, before, beforeEach, test } from 'node:test';
import { openstackAuthFromEnv } from '../../cloud/openstack/auth.ts';
import { KeystoneSession } from '../../cloud/openstack/keystone.ts';
import { NovaClient } from '../../cloud/openstack/nova.ts';
import { sendJson } from '../../sim/cloud-sim.ts';
import { type OpenStackSimulator, startOpenStackSimulator } from '../../sim/openstack/simulator.ts';
import { contextAt, testRequest } from '../../testing/bootstrap-request.ts';
import { dependencyOf, isDependencyFault } from '../dependency.ts';
import type { PolicyDecision } from '../types.ts';
import { type OpenStackPolicyOptions, openstackPolicy } from './openstack.ts';

const cluster = 'prod.example.com';
let sim: OpenStackSimulator;
let node: string;

function metadata(ig = 'nodes-a', name = cluster) {
  return { KubernetesCluster: name, k8s: name, KopsInstanceGroup: ig, KopsRole: 'Node' };
}

before(async () => {
  sim = await startOpenStackSimulator();
  node = sim.addServer({
    name: 'nodes-a-1-prod-example-com',
    fixed: ['10.0.0.5', 'fd00::5'],
    floating: ['203.0.113.5'],
    metadata: metadata(),
  }).id;
});
after(() => sim.close());
beforeEach(() => sim.resetFaults());

function policy(overrides: Partial<OpenStackPolicyOptions> = {}) {
  const nova = new NovaClient({
    session: new KeystoneSession({ auth: sim.passwordAuth }),
    retryDelayMs: 1,
    maxRetryWaitMs: 5,
    retries: 1,
  });
  return openstackPolicy({ clusterName: cluster, nova, ...overrides });
}

function request(serverId: string, remoteAddress = '10.0.0.5') {
  return testRequest({
    proof: { kind: 'cloud-id', scheme: 'x-openstack-id', token: serverId },
    remoteAddress,
  });
}

async function decide(serverId: string, remoteAddress?: string): Promise<PolicyDecision> {
  return policy().evaluate(request(serverId, remoteAddress), contextAt());
}

function denied(decision: PolicyDecision, reason: RegExp): void {
  assert.equal(decision.verdict, 'deny', JSON.stringify(decision));
  assert.match(decision.reasons.join(' '), reason);
}

test('a server asking from its own address is approved as kops names it, without a callback', async () => {
  for (const address of ['10.0.0.5', '::ffff:10.0.0.5', 'fd00:0:0:0:0:0:0:5', '203.0.113.5']) {
    const decision = await decide(node, address);
    assert.equal(decision.verdict, 'approve', address);
    if (decision.verdict !== 'approve') continue;
    assert.equal(decision.facts.nodeName, 'nodes-a-1-prod-example-com');
    assert.equal(decision.facts.instanceGroup, 'nodes-a');
    assert.deepEqual(decision.facts.ipAddresses, ['10.0.0.5', 'fd00::5', '203.0.113.5']);
    // kops' OpenStack nodes run no challenge server (UseChallengeCallback is false for OpenStack).
    assert.equal(decision.facts.challengeEndpoint, undefined);
    // The source address is the whole proof: a Node of the name in any state refuses it (kops' ErrAlreadyExists).
    assert.equal(decision.facts.firstJoinOnly, true);
    assert.equal(decision.facts.evidence['serverId'], node);
    // The server's incarnation (its UUID, never another server's): the certificates carry it.
    assert.equal(decision.facts.incarnationId, node);
  }
});

test("other proofs are not this policy's to judge", async () => {
  const decision = await policy().evaluate(
    testRequest({ proof: { kind: 'cloud-id', scheme: 'x-hetzner-id', token: '42' } }),
    contextAt(),
  );
  assert.equal(decision.verdict, 'abstain');
});

test('attack: another machine presenting a server id is refused (source address check)', async () => {
  denied(await decide(node, '10.0.0.99'), /comes from 10\.0\.0\.99, which is not an address of server/);
  denied(await decide(node, ''), /unknown address/);
});

test('attack: a server of another cluster in the same project is refused', async () => {
  const other = sim.addServer({
    name: 'intruder',
    fixed: ['10.0.0.7'],
    metadata: metadata('nodes', 'other.example.com'),
  }).id;
  denied(await decide(other, '10.0.0.7'), /belongs to cluster "other.example.com"/);
  const bare = sim.addServer({ name: 'bare', fixed: ['10.0.0.8'] }).id;
  denied(await decide(bare, '10.0.0.8'), /belongs to cluster ""/);
  const noGroup = sim.addServer({
    name: 'nogroup',
    fixed: ['10.0.0.9'],
    metadata: { KubernetesCluster: cluster },
  }).id;
  denied(await decide(noGroup, '10.0.0.9'), /no KopsInstanceGroup metadata/);
});

test("attack: a server of another project (another tenant's id) is refused as unknown", async () => {
  const foreign = sim.addServer({
    name: 'theirs',
    project: 'p2',
    fixed: ['10.0.0.10'],
    metadata: metadata(),
  }).id;
  denied(await decide(foreign, '10.0.0.10'), /Nova does not vouch for server .*could not be found/);
});

test("attack: another project's server, which the controller's admin token can read, is refused", async () => {
  const foreign = sim.addServer({
    name: 'theirs-too',
    project: 'p3',
    fixed: ['10.0.0.15'],
    metadata: metadata(),
  }).id;
  sim.setAdmin(true);
  try {
    denied(await decide(foreign, '10.0.0.15'), /is in project p3, not this controller's project/);
    assert.equal((await decide(node)).verdict, 'approve', 'our own servers still join');
  } finally {
    sim.setAdmin(false);
  }
});

test('stopped, erroring and deleted servers are refused', async () => {
  const stopped = sim.addServer({
    name: 'stopped',
    fixed: ['10.0.0.11'],
    metadata: metadata(),
    status: 'SHUTOFF',
  }).id;
  denied(await decide(stopped, '10.0.0.11'), /is SHUTOFF, not ACTIVE/);
  const broken = sim.addServer({
    name: 'broken',
    fixed: ['10.0.0.12'],
    metadata: metadata(),
    status: 'ERROR',
  }).id;
  denied(await decide(broken, '10.0.0.12'), /is ERROR, not ACTIVE/);
  const gone = sim.addServer({ name: 'gone', fixed: ['10.0.0.13'], metadata: metadata() }).id;
  sim.deleteServer(gone);
  denied(await decide(gone, '10.0.0.13'), /could not be found/);
});

test('malformed ids and server names that are no node name are refused', async () => {
  denied(await decide('../../servers/detail'), /not a Nova server id/);
  const odd = sim.addServer({ name: 'My Server', fixed: ['10.0.0.14'], metadata: metadata() }).id;
  denied(await decide(odd, '10.0.0.14'), /not a valid node name/);
});

test('Nova failing, throttling or not answering is a dependency fault (503), never a denial', async () => {
  for (const inject of [
    () => sim.failNext(2, 500, 'servers.get'),
    () => sim.throttleNext(2, 1, 'servers.get'),
    () => sim.failNext(2, 503, 'tokens.create'),
  ]) {
    sim.resetFaults();
    inject();
    await assert.rejects(decide(node), (err: unknown) => {
      assert.ok(isDependencyFault(err), String(err));
      assert.equal(dependencyOf(err), 'policy:openstack');
      return true;
    });
  }
  sim.resetFaults();
  sim.delayNext(1, 300, 'servers.get');
  await assert.rejects(policy({ lookupTimeoutMs: 50 }).evaluate(request(node), contextAt()), (err: unknown) =>
    isDependencyFault(err),
  );
});

test("the controller's own credentials being refused is a fault, not a verdict on the node", async () => {
  const auth = openstackAuthFromEnv({ ...sim.env, OS_PASSWORD: 'not-the-password' });
  const nova = new NovaClient({ session: new KeystoneSession({ auth }) });
  await assert.rejects(
    openstackPolicy({ clusterName: cluster, nova }).evaluate(request(node), contextAt()),
    (err: unknown) => isDependencyFault(err),
  );
});

test('a Nova record Nova never sends (a metadata value that is no string) is a fault (503), never a denial', async () => {
  // Nova's metadata values are always strings (openstack/nova nova/api/validation/parameter_types.py
  // `metadata`; gophercloud's Server.Metadata is map[string]string, so kops' verifier fails on any other).
  const record = sim.addServer({
    name: 'typed',
    fixed: ['10.0.0.16'],
    metadata: metadata(),
  });
  for (const metadataValue of [
    { ...record.metadata, KopsInstanceGroup: 5 },
    { ...record.metadata, KubernetesCluster: null },
  ]) {
    sim.answerWith('servers.get', (_req, res) =>
      sendJson(res, 200, { server: { ...record, metadata: metadataValue } }),
    );
    try {
      await assert.rejects(decide(record.id, '10.0.0.16'), (err: unknown) => {
        assert.ok(isDependencyFault(err), String(err));
        assert.equal(dependencyOf(err), 'policy:openstack');
        return true;
      });
    } finally {
      sim.answerWith('servers.get', undefined);
    }
  }
});

test('Keystone refusing the login request itself (404 at a wrong OS_AUTH_URL, 400) is a fault, never a verdict', async () => {
  // A Keystone URL of the wrong path is answered 404 (Keystone's {"error": {"code": 404, "title":
  // "Not Found"}}, or the web server's page in front of it) and a body it cannot validate 400
  // (openstack/keystone keystone/exception.py NotFound, ValidationError): the controller's
  // configuration is wrong, which says nothing about the node.
  const wrongPath = openstackAuthFromEnv({
    ...sim.env,
    OS_AUTH_URL: sim.authUrl.replace('/identity/v3', '/keystone'),
  });
  for (const auth of [wrongPath, sim.passwordAuth]) {
    sim.resetFaults();
    if (auth === sim.passwordAuth) sim.failNext(1, 400, 'tokens.create');
    const nova = new NovaClient({ session: new KeystoneSession({ auth }), retries: 0 });
    await assert.rejects(
      openstackPolicy({ clusterName: cluster, nova }).evaluate(request(node), contextAt()),
      (err: unknown) => {
        assert.ok(isDependencyFault(err), String(err));
        return true;
      },
    );
  }
});

test('a `created` in the server record that is no time is a dependency fault (503), never a denial nor dropped', async () => {
  const server = sim.addServer({
    name: 'nodes-a-bad-time',
    fixed: ['10.0.0.6'],
    metadata: metadata(),
    created: 'not a time',
  }).id;
  await assert.rejects(decide(server, '10.0.0.6'), (err: unknown) => {
    assert.ok(isDependencyFault(err), String(err));
    assert.equal(dependencyOf(err), 'policy:openstack');
    return true;
  });
});
