import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { after, before, beforeEach, test } from 'node:test';
import { ConfigError, KopsError, UnauthenticatedError, UnavailableError } from '../../errors.ts';
import { listenOnLoopback } from '../../net/loopback.ts';
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

/** A Keystone on loopback that answers every `POST /v3/auth/tokens` with `answer`. */
async function keystoneAnswering(answer: (req: IncomingMessage, res: ServerResponse) => void) {
  const listener = await listenOnLoopback(createServer(answer));
  const auth = {
    authUrl: `${listener.url}/identity/v3`,
    region: 'RegionOne',
    endpointInterface: 'public',
    credentials: { method: 'application-credential', id: 'cred-1', secret: 's' },
  } as const;
  return { session: new KeystoneSession({ auth }), close: () => listener.close() };
}

/**
 * A project-scoped token as Keystone answers it, with our own values: the fields and nesting of
 * openstack/keystone api-ref/source/v3/samples/admin/auth-application-credential-response.json
 * (expires_at with microseconds; endpoints with interface, region, region_id, url and id) and a
 * compute URL with the project in its path, as auth-password-user-name-unscoped-response-HTTP.txt.
 */
const realShapedToken = {
  token: {
    application_credential: { id: 'cred-1', name: 'kops', restricted: true },
    audit_ids: ['aaaaaaaaaaaaaaaaaaaaaa'],
    catalog: [
      {
        endpoints: [
          {
            region_id: 'RegionOne',
            url: 'https://nova.example:8774/v2.1/p1',
            region: 'RegionOne',
            interface: 'admin',
            id: 'e1',
          },
          {
            region_id: 'RegionOne',
            url: 'https://nova.example:8774/v2.1/p1',
            region: 'RegionOne',
            interface: 'public',
            id: 'e2',
          },
        ],
        type: 'compute',
        id: 's1',
        name: 'nova',
      },
    ],
    expires_at: '2030-01-15T22:14:05.123456Z',
    is_domain: false,
    issued_at: '2030-01-15T21:14:05.123456Z',
    methods: ['application_credential'],
    project: { domain: { id: 'default', name: 'Default' }, id: 'p1', name: 'kops' },
    roles: [{ id: 'r1', name: 'reader' }],
    user: { password_expires_at: null, domain: { id: 'default', name: 'Default' }, id: 'u1', name: 'kops' },
  },
};

test('a real-shaped Keystone token (201, X-Subject-Token, expires_at with microseconds) is read', async () => {
  const keystone = await keystoneAnswering((req, res) => {
    assert.equal(req.url, '/identity/v3/auth/tokens');
    res.writeHead(201, { 'content-type': 'application/json', 'x-subject-token': 'gAAAAAtoken' });
    res.end(JSON.stringify(realShapedToken));
  });
  try {
    const token = await keystone.session.token();
    assert.equal(token.token, 'gAAAAAtoken');
    assert.equal(token.projectId, 'p1');
    assert.equal(token.expiresAt, Date.UTC(2030, 0, 15, 22, 14, 5, 123));
    assert.equal(token.endpointOf('compute'), 'https://nova.example:8774/v2.1/p1');
  } finally {
    await keystone.close();
  }
});

test('a Keystone token answer that cannot be read is a malformed answer (a fault)', async () => {
  const answers: Array<{ headers: Record<string, string>; body: string }> = [
    { headers: {}, body: JSON.stringify(realShapedToken) },
    { headers: { 'x-subject-token': 't' }, body: '<html>' },
    {
      headers: { 'x-subject-token': 't' },
      body: JSON.stringify({ token: { ...realShapedToken.token, expires_at: 'soon' } }),
    },
  ];
  for (const { headers, body } of answers) {
    const keystone = await keystoneAnswering((_req, res) => {
      res.writeHead(201, { 'content-type': 'application/json', ...headers });
      res.end(body);
    });
    try {
      await assert.rejects(keystone.session.token(), (err: unknown) => {
        assert.ok(err instanceof KopsError && err.kind === 'unavailable', String(err));
        assert.equal(err.reasonCode, 'malformed-answer');
        return true;
      });
    } finally {
      await keystone.close();
    }
  }
});

test('Keystone refusing the login itself (404 at a wrong OS_AUTH_URL, 400) is a configuration error naming OS_AUTH_URL', async () => {
  // openstack/keystone keystone/exception.py: NotFound 404, ValidationError 400, in its
  // {"error": {"code", "title", "message"}} envelope.
  const wrongPath = openstackAuthFromEnv({
    ...sim.env,
    OS_AUTH_URL: sim.authUrl.replace('/identity/v3', '/keystone'),
  });
  await assert.rejects(
    new KeystoneSession({ auth: wrongPath }).token(),
    (err: unknown) =>
      err instanceof ConfigError &&
      /Keystone refused the login at .*\/keystone\/v3\/auth\/tokens \(tokens.create: HTTP 404.*check OS_AUTH_URL/.test(
        err.message,
      ),
  );
  sim.failNext(1, 400, 'tokens.create');
  await assert.rejects(
    new KeystoneSession({ auth: sim.passwordAuth }).token(),
    (err: unknown) => err instanceof ConfigError && /HTTP 400: simulated fault 400/.test(err.message),
  );
  // OS_AUTH_URL at a web server that is not Keystone: its HTML 404 names the same setting.
  const { startScriptedApi } = await import('../scripted-api.test-support.ts');
  const web = await startScriptedApi(() => ({ status: 404, raw: true, body: '<html>Not Found</html>' }));
  try {
    await assert.rejects(
      new KeystoneSession({ auth: openstackAuthFromEnv({ ...sim.env, OS_AUTH_URL: web.url }) }).token(),
      (err: unknown) => err instanceof ConfigError && /check OS_AUTH_URL/.test(err.message),
    );
  } finally {
    await web.close();
  }
});
