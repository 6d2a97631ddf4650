import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { type OpenStackSimulator, startOpenStackSimulator } from './simulator.ts';

let sim: OpenStackSimulator;
let token: string;
before(async () => {
  sim = await startOpenStackSimulator({ maxLimit: 2 });
  for (let i = 0; i < 3; i++) sim.addServer({ name: `s${i}` });
  const answer = await fetch(`${sim.authUrl}/auth/tokens`, {
    method: 'POST',
    body: JSON.stringify({
      auth: {
        identity: {
          methods: ['application_credential'],
          application_credential: sim.applicationCredentialAuth.credentials,
        },
      },
    }),
  });
  assert.equal(answer.status, 201);
  token = answer.headers.get('x-subject-token') ?? '';
});
after(() => sim.close());

const nova = (path: string, auth = token) =>
  fetch(`${sim.authUrl.replace('/identity/v3', '/compute/v2.1')}${path}`, {
    headers: { 'x-auth-token': auth },
  });

test('Nova answers as the real API: clamped pages with a next link, fault bodies, 401 without a token', async () => {
  const first = (await (await nova('/servers/detail?limit=50')).json()) as {
    servers: unknown[];
    servers_links?: Array<{ rel: string; href: string }>;
  };
  assert.equal(first.servers.length, 2);
  assert.match(first.servers_links?.[0]?.href ?? '', /limit=2&marker=/);
  const badMarker = await nova('/servers/detail?marker=nope');
  assert.equal(badMarker.status, 400);
  assert.deepEqual(await badMarker.json(), { badRequest: { code: 400, message: 'marker [nope] not found' } });
  const missing = await nova('/servers/nope');
  assert.equal(missing.status, 404);
  assert.ok('itemNotFound' in ((await missing.json()) as object));
  assert.equal((await nova('/servers/detail', 'forged')).status, 401);
  sim.throttleNext(1, 3);
  const throttled = await nova('/servers/detail');
  assert.equal(throttled.status, 429);
  assert.equal(throttled.headers.get('retry-after'), '3');
  assert.ok('overLimit' in ((await throttled.json()) as object));
});

test("an admin token reads another project's server by id (with its tenant_id); listings stay the token's project", async () => {
  const theirs = sim.addServer({ name: 'theirs', project: 'another-project' });
  const issue = async () => {
    const answer = await fetch(`${sim.authUrl}/auth/tokens`, {
      method: 'POST',
      body: JSON.stringify({
        auth: {
          identity: {
            methods: ['application_credential'],
            application_credential: sim.applicationCredentialAuth.credentials,
          },
        },
      }),
    });
    const body = (await answer.json()) as { token: { roles: { name: string }[] } };
    return { token: answer.headers.get('x-subject-token') ?? '', roles: body.token.roles.map((r) => r.name) };
  };
  try {
    assert.equal((await nova(`/servers/${theirs.id}`)).status, 404, 'a member token: not found');
    sim.setAdmin(true);
    const admin = await issue();
    assert.ok(admin.roles.includes('admin'));
    const shown = await nova(`/servers/${theirs.id}`, admin.token);
    assert.equal(shown.status, 200);
    assert.equal(
      ((await shown.json()) as { server: { tenant_id: string } }).server.tenant_id,
      'another-project',
    );
    const listed = (await (await nova('/servers/detail?limit=50', admin.token)).json()) as {
      servers: { id: string; tenant_id: string }[];
    };
    assert.ok(listed.servers.every((s) => s.tenant_id === sim.projectId));
    assert.equal((await nova(`/servers/${theirs.id}`)).status, 404, 'tokens issued before keep their roles');
  } finally {
    sim.setAdmin(false);
    sim.deleteServer(theirs.id);
  }
});

test('Keystone honours auth.scope: none is an unscoped token without a catalog, an unknown project is 401', async () => {
  const credentials = sim.passwordAuth.credentials;
  assert.equal(credentials.method, 'password');
  const { user, password } = credentials;
  const issue = (scope?: unknown) =>
    fetch(`${sim.authUrl}/auth/tokens`, {
      method: 'POST',
      body: JSON.stringify({
        auth: {
          identity: { methods: ['password'], password: { user: { ...user, password } } },
          ...(scope === undefined ? {} : { scope }),
        },
      }),
    });
  type TokenBody = { token: { project?: { id: string }; catalog?: unknown[]; roles?: unknown[] } };

  const unscoped = await issue();
  assert.equal(unscoped.status, 201);
  const unscopedToken = (await unscoped.json()) as TokenBody;
  assert.equal(unscopedToken.token.project, undefined);
  assert.equal(unscopedToken.token.catalog, undefined);
  assert.equal(unscopedToken.token.roles, undefined);
  // The simulated Nova takes project-scoped tokens only.
  assert.equal((await nova('/servers/detail', unscoped.headers.get('x-subject-token') ?? '')).status, 401);

  for (const project of [
    { name: 'kops', domain: { name: 'Default' } },
    { name: 'kops', domain: { id: 'default' } },
    { id: sim.projectId },
  ]) {
    const scoped = await issue({ project });
    assert.equal(scoped.status, 201, JSON.stringify(project));
    const body = (await scoped.json()) as TokenBody;
    assert.equal(body.token.project?.id, sim.projectId);
    assert.ok(body.token.catalog?.length);
    assert.equal((await nova('/servers/detail', scoped.headers.get('x-subject-token') ?? '')).status, 200);
  }

  // Keystone hides why (ProjectNotFound, DomainNotFound, no role on it) behind a plain 401.
  for (const scope of [
    { project: { name: 'kpos', domain: { name: 'Default' } } },
    { project: { name: 'kops', domain: { name: 'Elsewhere' } } },
    { project: { id: 'not-a-project' } },
    { domain: { name: 'Default' } },
  ]) {
    const refused = await issue(scope);
    assert.equal(refused.status, 401, JSON.stringify(scope));
    assert.deepEqual(await refused.json(), {
      error: {
        code: 401,
        title: 'Unauthorized',
        message: 'The request you have made requires authentication.',
      },
    });
  }
  // A project name needs its domain (Keystone's ValidationError).
  const noDomain = await issue({ project: { name: 'kops' } });
  assert.equal(noDomain.status, 400);
  assert.match(
    ((await noDomain.json()) as { error: { message: string } }).error.message,
    /^Expecting to find domain in project/,
  );
});
