import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseInventory } from '../../cloud/metal/inventory.ts';
import { ConfigError, UnavailableError } from '../../errors.ts';
import { contextAt, testRequest } from '../../testing/bootstrap-request.ts';
import { isDependencyFault } from '../dependency.ts';
import type { BootstrapTokenValidator } from '../types.ts';
import { metalPolicy, peerAddress } from './metal.ts';

const inventory = parseInventory(
  `hosts:
  - name: host-1
    instanceGroup: metal-nodes
    addresses: [10.0.0.5, host-1.lan, "fd00::5"]
  - name: host-2
    instanceGroup: metal-nodes
    addresses: [10.0.0.6]
`,
  'inventory.yaml',
);
const store = { current: async () => inventory };
const token = 'abcdef.0123456789abcdef';
const tokens: BootstrapTokenValidator = {
  validate: async (t) =>
    t === token
      ? { id: 'abcdef', usages: { authentication: true, signing: false }, extraGroups: [] }
      : { rejected: `bootstrap token ${t.slice(0, 6)}: no such token` },
};

function request(claimedNodeName: string, remoteAddress: string, withToken?: string) {
  return testRequest({
    claimedNodeName,
    remoteAddress,
    proof: withToken ? { kind: 'bootstrap-token', token: withToken } : { kind: 'none' },
  });
}

test('metal approves an inventory host from its own address with a valid token; facts from the inventory', async () => {
  const decision = await metalPolicy({ inventory: store, tokens }).evaluate(
    request('host-1', '::ffff:10.0.0.5', token),
    contextAt(),
  );
  assert.ok(decision.verdict === 'approve', JSON.stringify(decision));
  assert.deepEqual(decision.facts, {
    nodeName: 'host-1',
    instanceGroup: 'metal-nodes',
    instanceId: 'host-1',
    dnsNames: ['host-1.lan'],
    ipAddresses: ['10.0.0.5', 'fd00::5'],
    evidence: { providerID: 'metal://host-1', tokenId: 'abcdef', peer: '10.0.0.5' },
  });
});

test('metal queues a verified host without a token, with its verified facts', async () => {
  const decision = await metalPolicy({ inventory: store, tokens }).evaluate(
    request('host-1', '10.0.0.5'),
    contextAt(),
  );
  assert.ok(decision.verdict === 'queue');
  assert.equal(decision.facts?.instanceGroup, 'metal-nodes');
  assert.match(decision.reasons[0] ?? '', /host-1 is verified/);
});

test('metal denies a host without a token when configured to', async () => {
  const decision = await metalPolicy({ inventory: store, withoutToken: 'deny' }).evaluate(
    request('host-1', '10.0.0.5'),
    contextAt(),
  );
  assert.equal(decision.verdict, 'deny');
});

test("attack: a host claimed from another host's address is denied", async () => {
  const decision = await metalPolicy({ inventory: store, tokens }).evaluate(
    request('host-1', '10.0.0.6', token),
    contextAt(),
  );
  assert.equal(decision.verdict, 'deny');
  assert.match(decision.reasons[0] ?? '', /not an address of host host-1/);
});

test('attack: a name outside the inventory, or a bad token, is denied', async () => {
  const p = metalPolicy({ inventory: store, tokens });
  assert.match(
    (await p.evaluate(request('rogue', '10.0.0.5', token), contextAt())).reasons[0] ?? '',
    /not a host/,
  );
  assert.match(
    (await p.evaluate(request('host-1', '10.0.0.5', 'abcdef.ffffffffffffffff'), contextAt())).reasons[0] ??
      '',
    /unknown, expired/,
  );
  assert.equal((await p.evaluate(testRequest(), contextAt())).verdict, 'deny');
});

test('metal: an inventory that cannot be read is a dependency fault (the node retries), not a denial', async () => {
  for (const failure of [
    new UnavailableError('s3 GET metal/inventory.yaml: HTTP 503'),
    new ConfigError('no metal inventory at s3://state/metal/inventory.yaml'),
  ]) {
    const broken = { current: async () => Promise.reject(failure) };
    await assert.rejects(
      metalPolicy({ inventory: broken, tokens }).evaluate(request('host-1', '10.0.0.5', token), contextAt()),
      (err: unknown) => isDependencyFault(err) && err.details?.['dependency'] === 'state-store',
      failure.message,
    );
  }
});

test('peerAddress unwraps IPv4-mapped IPv6', () => {
  assert.equal(peerAddress('::FFFF:10.1.2.3'), '10.1.2.3');
  assert.equal(peerAddress('FD00::5'), 'fd00::5');
});
