import assert from 'node:assert/strict';
import { after, before, beforeEach, test } from 'node:test';
import { ConfigError, UnauthenticatedError, UnavailableError } from '../../errors.ts';
import { type OpenStackSimulator, startOpenStackSimulator } from '../../sim/openstack/simulator.ts';
import { openstackAuthFromEnv } from './auth.ts';
import { type CatalogEntry, endpointOf, KeystoneSession } from './keystone.ts';
import { NovaClient } from './nova.ts';

let sim: OpenStackSimulator;
let noNova: OpenStackSimulator;
before(async () => {
  sim = await startOpenStackSimulator();
  noNova = await startOpenStackSimulator({ compute: false });
});
after(() => Promise.all([sim.close(), noNova.close()]));
beforeEach(() => {
  sim.clearCalls();
  sim.resetFaults();
});

test('one token carries the catalog: Nova and Swift find their endpoints in it, with one login', async () => {
  const session = new KeystoneSession({ auth: sim.passwordAuth });
  const token = await session.token();
  assert.equal(token.endpointOf('object-store'), sim.swift.storageUrl);
  assert.match(token.endpointOf('compute'), /\/compute\/v2\.1$/);
  assert.ok(token.catalog.some((entry) => entry.type === 'identity'));
  assert.equal(token.projectId, sim.projectId);
  const nova = new NovaClient({ session });
  await nova.listServers();
  assert.equal(await session.token(), token, 'the token is kept');
  assert.equal(sim.count('tokens.create'), 1);
});

test('endpointOf: the region and interface asked for, by region or region_id, without a trailing slash', () => {
  const catalog: CatalogEntry[] = [
    { type: 'compute', endpoints: [{ interface: 'public', region: 'RegionTwo', url: 'https://two/' }] },
    {
      type: 'object-store',
      endpoints: [
        { interface: 'public', region_id: 'RegionOne', url: 'https://public/v1/AUTH_p//' },
        { interface: 'internal', region_id: 'RegionOne', url: 'https://internal/v1/AUTH_p' },
      ],
    },
  ];
  assert.equal(endpointOf(catalog, 'object-store', 'RegionOne', 'public'), 'https://public/v1/AUTH_p');
  assert.equal(endpointOf(catalog, 'object-store', 'RegionOne', 'internal'), 'https://internal/v1/AUTH_p');
  assert.equal(endpointOf(catalog, 'compute', 'RegionTwo', 'public'), 'https://two');
  assert.throws(
    () => endpointOf(catalog, 'compute', 'RegionOne', 'public'),
    (err: unknown) =>
      err instanceof ConfigError &&
      err.message ===
        'OpenStack: the service catalog has no public compute (Nova) endpoint in region RegionOne: ' +
          'check OS_REGION_NAME (and OS_INTERFACE), and that the cloud runs Nova',
  );
});

test('a catalog without compute: the login succeeds, and only Nova is refused, naming what is missing', async () => {
  const session = new KeystoneSession({ auth: noNova.passwordAuth });
  const token = await session.token();
  assert.equal(token.endpointOf('object-store'), noNova.swift.storageUrl);
  await assert.rejects(
    new NovaClient({ session }).listServers(),
    (err: unknown) =>
      err instanceof ConfigError && /no public compute \(Nova\) endpoint in region/.test(err.message),
  );
  assert.equal(noNova.count('tokens.create'), 1, 'the token stands: it is the catalog that lacks Nova');
});

test('a token is renewed before it expires', async () => {
  let now = Date.now();
  const session = new KeystoneSession({ auth: sim.passwordAuth, now: () => now });
  const first = await session.token();
  now = first.expiresAt - 300_001;
  assert.equal(await session.token(), first);
  now = first.expiresAt - 299_999;
  assert.notEqual((await session.token()).token, first.token);
  assert.equal(sim.count('tokens.create'), 2);
});

test('concurrent callers share one login', async () => {
  const session = new KeystoneSession({ auth: sim.passwordAuth });
  const tokens = await Promise.all([session.token(), session.token(), session.token()]);
  assert.equal(new Set(tokens.map((t) => t.token)).size, 1);
  assert.equal(sim.count('tokens.create'), 1);
});

test("a call renews a refused token once, whatever its attempts; another call's renewal is its own", async () => {
  const session = new KeystoneSession({ auth: sim.passwordAuth });
  const call = session.forCall();
  const refused = await call.token();
  assert.equal(call.renew(refused), true);
  const renewed = await call.token();
  assert.notEqual(renewed.token, refused.token);
  assert.equal(call.renew(renewed), false, 'a second refusal is the answer');
  assert.equal(await session.token(), renewed, 'and the token stays');
  // A stale refusal (another caller renewed already) does not drop the new token.
  assert.equal(session.forCall().renew(refused), true);
  assert.equal(await session.token(), renewed);
  assert.equal(sim.count('tokens.create'), 2);
});

test("refused credentials name the project and the variables, as Nova's and Swift's callers see them", async () => {
  const wrong = new KeystoneSession({ auth: openstackAuthFromEnv({ ...sim.env, OS_PASSWORD: 'wrong' }) });
  await assert.rejects(
    wrong.token(),
    (err: unknown) =>
      err instanceof UnauthenticatedError &&
      err.upstreamStatus === 401 &&
      /Keystone refused the controller's credentials for project kops \(domain Default\): check OS_USERNAME and OS_PASSWORD \(or OS_APPLICATION_CREDENTIAL_ID and OS_APPLICATION_CREDENTIAL_SECRET\)/.test(
        err.message,
      ),
  );
});

test('Keystone down is unavailable, naming Keystone', async () => {
  sim.failNext(1, 503, 'tokens.create');
  await assert.rejects(
    new KeystoneSession({ auth: sim.passwordAuth }).token(),
    (err: unknown) =>
      err instanceof UnavailableError &&
      err.message.startsWith(`Keystone (${sim.authUrl}) is unavailable: tokens.create: HTTP 503`),
  );
});
