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
