/** The HTTP edge with raw requests: bad input gets the apiserver's Status answers and the server stays up. */
import assert from 'node:assert/strict';
import { request } from 'node:https';
import { after, before, describe, test } from 'node:test';
import fc from 'fast-check';
import { adminUser, type SimApiServer, startApiServer } from './index.ts';

interface RawResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  body: Record<string, unknown>;
}

interface RawRequest {
  method?: string;
  path: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
  token?: string | null;
}

const token = 'handler-test-admin-token';

function raw(sim: SimApiServer, req: RawRequest): Promise<RawResponse> {
  const url = new URL(sim.url);
  const headers: Record<string, string> = { ...(req.headers ?? {}) };
  if (req.token !== null) headers['Authorization'] = `Bearer ${req.token ?? token}`;
  return new Promise((resolve, reject) => {
    const r = request(
      {
        host: url.hostname,
        port: url.port,
        method: req.method ?? 'GET',
        path: req.path,
        headers,
        ca: sim.caCertificate,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let body: Record<string, unknown> = {};
          try {
            body = JSON.parse(text);
          } catch {
            // Not every answer is JSON (healthz, protobuf).
          }
          resolve({ status: res.statusCode ?? 0, headers: res.headers, text, body });
        });
      },
    );
    r.on('error', reject);
    r.end(req.body);
  });
}

function json(body: unknown, contentType = 'application/json'): Pick<RawRequest, 'headers' | 'body'> {
  return {
    headers: { 'Content-Type': contentType },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  };
}

describe('simulated apiserver HTTP edge', () => {
  let sim: SimApiServer;
  before(async () => {
    sim = await startApiServer();
    sim.addToken(token, adminUser);
    sim.store.create({ apiVersion: 'v1', kind: 'Node', metadata: { name: 'n1' } });
  });
  after(() => sim.close());

  test('shapes a NotFound exactly as the apiserver does', async () => {
    const res = await raw(sim, { path: '/api/v1/nodes/missing' });
    assert.equal(res.status, 404);
    assert.equal(
      res.text,
      '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"nodes \\"missing\\" not found","reason":"NotFound","details":{"name":"missing","kind":"nodes"},"code":404}',
    );
    const csr = await raw(sim, { path: '/apis/certificates.k8s.io/v1/certificatesigningrequests/nope' });
    assert.deepEqual(csr.body['details'], {
      name: 'nope',
      group: 'certificates.k8s.io',
      kind: 'certificatesigningrequests',
    });
  });

  test('serves health, version and discovery', async () => {
    const health = await raw(sim, { path: '/healthz', token: null });
    assert.equal(health.status, 200);
    assert.equal(health.text, 'ok');
    for (const path of ['/livez', '/readyz'])
      assert.equal((await raw(sim, { path, token: null })).text, 'ok');
    assert.match(String((await raw(sim, { path: '/version', token: null })).body['gitVersion']), /^v1\.\d+/);
    const core = await raw(sim, { path: '/api/v1' });
    const resources = core.body['resources'] as {
      name: string;
      shortNames?: string[];
      verbs: string[];
      namespaced: boolean;
    }[];
    const nodes = resources.find((r) => r.name === 'nodes');
    assert.deepEqual(nodes?.shortNames, ['no']);
    assert.equal(nodes?.namespaced, false);
    assert.ok(nodes?.verbs.includes('watch'));
    assert.ok(resources.some((r) => r.name === 'nodes/status'));
    assert.deepEqual(resources.find((r) => r.name === 'pods')?.shortNames, ['po']);
    const groups = (await raw(sim, { path: '/apis' })).body['groups'] as { name: string }[];
    assert.deepEqual(
      groups.map((g) => g.name),
      [
        'coordination.k8s.io',
        'certificates.k8s.io',
        'kops.k8s.io',
        'cluster.x-k8s.io',
        'authentication.k8s.io',
        'authorization.k8s.io',
      ],
    );
    const certs = await raw(sim, { path: '/apis/certificates.k8s.io/v1' });
    const csr = (certs.body['resources'] as { name: string; shortNames?: string[] }[]).find(
      (r) => r.name === 'certificatesigningrequests',
    );
    assert.deepEqual(csr?.shortNames, ['csr']);
    const proto = await raw(sim, {
      path: '/openapi/v2',
      headers: { Accept: 'application/com.github.proto-openapi.spec.v2@v1.0+protobuf' },
    });
    assert.equal(proto.status, 200);
    assert.equal(proto.text.slice(0, 5), '\n\u00032.0');
  });

  test('answers 401 with a Status when no credentials are sent', async () => {
    const res = await raw(sim, { path: '/api/v1/nodes', token: null });
    assert.equal(res.status, 401);
    assert.deepEqual(res.body, {
      kind: 'Status',
      apiVersion: 'v1',
      metadata: {},
      status: 'Failure',
      message: 'Unauthorized',
      reason: 'Unauthorized',
      code: 401,
    });
    assert.equal((await raw(sim, { path: '/api/v1/nodes', token: 'wrong' })).status, 401);
  });

  test('rejects malformed JSON with 400', async () => {
    const res = await raw(sim, {
      method: 'POST',
      path: '/api/v1/namespaces/default/configmaps',
      ...json('{"metadata": {'),
    });
    assert.equal(res.status, 400);
    assert.equal(res.body['reason'], 'BadRequest');
    assert.match(String(res.body['message']), /^couldn't get version\/kind; json parse error: /);
  });

  test('rejects unknown fields under fieldValidation=Strict and drops them with a warning otherwise', async () => {
    const body = { metadata: { name: 'strict' }, data: { a: 'b' }, bogus: 1 };
    const strict = await raw(sim, {
      method: 'POST',
      path: '/api/v1/namespaces/default/configmaps?fieldValidation=Strict',
      ...json(body),
    });
    assert.equal(strict.status, 400);
    assert.equal(strict.body['message'], 'strict decoding error: unknown field "bogus"');
    const warned = await raw(sim, {
      method: 'POST',
      path: '/api/v1/namespaces/default/configmaps',
      ...json(body),
    });
    assert.equal(warned.status, 201);
    assert.equal(warned.headers['warning'], '299 - "unknown field \\"bogus\\""');
    assert.equal(warned.body['bogus'], undefined);
    assert.equal(sim.store.get('configmaps', 'default', 'strict')?.['bogus'], undefined);
  });

  test('answers 415 for a patch with a non-patch content type', async () => {
    const res = await raw(sim, {
      method: 'PATCH',
      path: '/api/v1/nodes/n1',
      ...json({ metadata: { labels: { a: 'b' } } }),
    });
    assert.equal(res.status, 415);
    assert.equal(res.body['reason'], 'UnsupportedMediaType');
  });

  test('answers 413 for a body over 3 MiB and keeps serving', async () => {
    const big = JSON.stringify({ metadata: { name: 'big' }, data: { a: 'x'.repeat(3 * 1024 * 1024) } });
    const res = await raw(sim, {
      method: 'POST',
      path: '/api/v1/namespaces/default/configmaps',
      ...json(big),
    });
    assert.equal(res.status, 413);
    assert.equal(res.body['message'], 'Request entity too large: limit is 3145728');
    assert.equal((await raw(sim, { path: '/api/v1/nodes' })).status, 200);
  });

  test('a patch naming another uid in its metadata is refused as the API server does: 422 Invalid, metadata.uid immutable', async () => {
    const created = sim.store.create({ apiVersion: 'v1', kind: 'Node', metadata: { name: 'reborn' } });
    const uid = created.metadata.uid as string;
    const stale = '00000000-0000-4000-8000-000000000001';
    const patch = (body: unknown, contentType: string) =>
      raw(sim, { method: 'PATCH', path: '/api/v1/nodes/reborn', ...json(body, contentType) });
    for (const contentType of ['application/strategic-merge-patch+json', 'application/merge-patch+json']) {
      const refused = await patch({ metadata: { uid: stale, labels: { a: 'b' } } }, contentType);
      assert.equal(refused.status, 422, contentType);
      assert.deepEqual(refused.body, {
        kind: 'Status',
        apiVersion: 'v1',
        metadata: {},
        status: 'Failure',
        message: `Node "reborn" is invalid: metadata.uid: Invalid value: "${stale}": field is immutable`,
        reason: 'Invalid',
        details: {
          name: 'reborn',
          kind: 'Node',
          causes: [
            {
              reason: 'FieldValueInvalid',
              message: `Invalid value: "${stale}": field is immutable`,
              field: 'metadata.uid',
            },
          ],
        },
        code: 422,
      });
    }
    const jsonPatch = await patch(
      [{ op: 'replace', path: '/metadata/uid', value: stale }],
      'application/json-patch+json',
    );
    assert.equal(jsonPatch.status, 422);
    assert.equal(
      sim.store.get('nodes', undefined, 'reborn')?.metadata.labels?.['a'],
      undefined,
      'nothing written',
    );
    // Its own uid is no change: the patch applies.
    const applied = await patch(
      { metadata: { uid, labels: { a: 'b' } } },
      'application/strategic-merge-patch+json',
    );
    assert.equal(applied.status, 200);
    assert.equal(sim.store.get('nodes', undefined, 'reborn')?.metadata.labels?.['a'], 'b');
    sim.store.delete('nodes', undefined, 'reborn');
  });

  test('answers 422 TooLong for config map or secret data over 1 MiB, on create, update and patch', async () => {
    const mib = 1024 * 1024;
    const tooLong = (kind: string, name: string, field: string) => ({
      kind: 'Status',
      apiVersion: 'v1',
      metadata: {},
      status: 'Failure',
      message: `${kind} "${name}" is invalid: ${field}: Too long: may not be more than 1048576 bytes`,
      reason: 'Invalid',
      details: {
        name,
        kind,
        causes: [
          { reason: 'FieldValueTooLong', message: 'Too long: may not be more than 1048576 bytes', field },
        ],
      },
      code: 422,
    });
    const configMaps = '/api/v1/namespaces/default/configmaps';
    const created = await raw(sim, {
      method: 'POST',
      path: configMaps,
      ...json({ metadata: { name: 'over' }, data: { a: 'x'.repeat(mib), b: 'y' } }),
    });
    assert.equal(created.status, 422);
    assert.deepEqual(created.body, tooLong('ConfigMap', 'over', '[]'));
    assert.equal(sim.store.get('configmaps', 'default', 'over'), undefined);

    const full = await raw(sim, {
      method: 'POST',
      path: configMaps,
      ...json({ metadata: { name: 'full' }, data: { a: 'x'.repeat(mib - 1) } }),
    });
    assert.equal(full.status, 201);
    const replaced = await raw(sim, {
      method: 'PUT',
      path: `${configMaps}/full`,
      ...json({ metadata: { name: 'full' }, data: { a: 'x'.repeat(mib - 1) }, binaryData: { b: 'AAA=' } }),
    });
    assert.equal(replaced.status, 422);
    assert.deepEqual(replaced.body, tooLong('ConfigMap', 'full', '[]'));
    for (const [contentType, patch] of [
      ['application/merge-patch+json', { data: { b: 'yy' } }],
      ['application/strategic-merge-patch+json', { data: { b: 'yy' } }],
      ['application/json-patch+json', [{ op: 'add', path: '/data/b', value: 'yy' }]],
    ] as const) {
      const patched = await raw(sim, {
        method: 'PATCH',
        path: `${configMaps}/full`,
        ...json(patch, contentType),
      });
      assert.equal(patched.status, 422, contentType);
      assert.deepEqual(patched.body, tooLong('ConfigMap', 'full', '[]'), contentType);
    }
    assert.deepEqual(Object.keys(sim.store.get('configmaps', 'default', 'full')?.['data'] as object), ['a']);

    // A Secret counts data after stringData is folded in, and reports `data`.
    const secret = await raw(sim, {
      method: 'POST',
      path: '/api/v1/namespaces/default/secrets',
      ...json({
        metadata: { name: 'over' },
        data: { a: Buffer.alloc(mib).toString('base64') },
        stringData: { b: 'y' },
      }),
    });
    assert.equal(secret.status, 422);
    assert.deepEqual(secret.body, tooLong('Secret', 'over', 'data'));
  });

  test('answers 400 for bad selectors, continue tokens, versions and encodings', async () => {
    const cases: [string, RegExp][] = [
      ['/api/v1/nodes?labelSelector=a%20b', /^unable to parse requirement/],
      ['/api/v1/nodes?labelSelector=a%3D%3D%3Db', /^unable to parse requirement/],
      ['/api/v1/nodes?fieldSelector=nonsense', /^invalid selector: 'nonsense'/],
      ['/api/v1/nodes?fieldSelector=spec.providerID%3Dx', /^field label not supported: spec.providerID/],
      ['/api/v1/nodes?limit=1&continue=not-a-token!', /^invalid continue token/],
      ['/api/v1/nodes?resourceVersion=abc', /^invalid resource version/],
      ['/api/v1/namespaces/%zz/pods', /not valid percent-encoding/],
    ];
    for (const [path, message] of cases) {
      const res = await raw(sim, { path });
      assert.equal(res.status, 400, path);
      assert.match(String(res.body['message']), message, path);
    }
    const match = await raw(sim, { path: '/api/v1/nodes?resourceVersionMatch=Exact' });
    assert.equal(match.status, 422);
    assert.match(
      String(match.body['message']),
      /resourceVersionMatch is forbidden unless resourceVersion is provided/,
    );
  });

  test('answers 404 for unknown paths and 405 for unsupported verbs', async () => {
    for (const path of [
      '/api/v1/widgets',
      '/apis/example.com/v1/things',
      '/api/v1/pods/x',
      '/api/v1/nodes/n1/proxy',
      '/nothing',
    ]) {
      const res = await raw(sim, { path });
      assert.equal(res.status, 404, path);
      assert.equal(res.body['message'], 'the server could not find the requested resource', path);
    }
    const post = await raw(sim, { method: 'POST', path: '/api/v1/nodes/n1', ...json({}) });
    assert.equal(post.status, 405);
    assert.equal(post.body['reason'], 'MethodNotAllowed');
    assert.equal((await raw(sim, { method: 'PUT', path: '/api/v1/nodes', ...json({}) })).status, 405);
    assert.equal((await raw(sim, { path: '/apis/authentication.k8s.io/v1/tokenreviews' })).status, 405);
  });

  test('checks names and kinds in the body against the URL', async () => {
    const renamed = await raw(sim, {
      method: 'PUT',
      path: '/api/v1/nodes/n1',
      ...json({ metadata: { name: 'n2' } }),
    });
    assert.equal(renamed.status, 400);
    assert.equal(
      renamed.body['message'],
      'the name of the object (n2) does not match the name on the URL (n1)',
    );
    const wrongKind = await raw(sim, {
      method: 'POST',
      path: '/api/v1/nodes',
      ...json({ kind: 'Pod', metadata: { name: 'x' } }),
    });
    assert.equal(wrongKind.status, 400);
    const otherNs = await raw(sim, {
      method: 'POST',
      path: '/api/v1/namespaces/default/configmaps',
      ...json({ metadata: { name: 'x', namespace: 'kube-system' } }),
    });
    assert.equal(otherNs.status, 400);
    const yaml = await raw(sim, {
      method: 'POST',
      path: '/api/v1/nodes',
      ...json('metadata:\n  name: from-yaml\n', 'application/yaml'),
    });
    assert.equal(yaml.status, 201);
  });

  test('refuses wrongly typed metadata at decoding, like the typed decoder', async () => {
    const res = await raw(sim, { method: 'POST', path: '/api/v1/nodes', ...json({ metadata: { name: 7 } }) });
    assert.equal(res.status, 400);
    assert.equal(
      res.body['message'],
      'json: cannot unmarshal number into Go struct field ObjectMeta.metadata.name of type string',
    );
    const labels = await raw(sim, {
      method: 'PATCH',
      path: '/api/v1/nodes/n1',
      ...json({ metadata: { labels: { a: 1 } } }, 'application/merge-patch+json'),
    });
    assert.equal(labels.status, 400);
  });

  test('dryRun=All validates without storing', async () => {
    const res = await raw(sim, {
      method: 'POST',
      path: '/api/v1/nodes?dryRun=All',
      ...json({ metadata: { name: 'dry' } }),
    });
    assert.equal(res.status, 201);
    assert.equal(sim.store.get('nodes', undefined, 'dry'), undefined);
  });

  test('answers arbitrary paths, methods and bodies without a server error (property)', async () => {
    const segment = fc.constantFrom(
      'api',
      'apis',
      'v1',
      'namespaces',
      'default',
      'nodes',
      'pods',
      'n1',
      'status',
      'approval',
      'watch',
      'certificates.k8s.io',
      '%',
      '%41',
      '..',
      'x%20y',
    );
    const query = fc.constantFrom(
      '',
      '?watch=1&timeoutSeconds=1',
      '?limit=-1',
      '?labelSelector=(',
      '?fieldSelector=a',
      '?continue=eyJ2IjoxfQ',
      '?resourceVersion=99999999',
      '?dryRun=All',
      '?fieldValidation=Loose',
    );
    const method = fc.constantFrom('GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS');
    const body = fc.oneof(
      fc.constant(''),
      fc.json(),
      fc.string(),
      fc.constant('{"metadata":{"name":"n1"},"spec":{"taints":[{}]}}'),
    );
    const contentType = fc.constantFrom(
      'application/json',
      'application/merge-patch+json',
      'application/json-patch+json',
      'application/strategic-merge-patch+json',
      'text/plain',
      'application/yaml',
    );
    await fc.assert(
      fc.asyncProperty(
        fc.array(segment, { maxLength: 7 }),
        query,
        method,
        body,
        contentType,
        async (parts, q, m, b, ct) => {
          const res = await raw(sim, {
            method: m,
            path: `/${parts.join('/')}${q}`,
            headers: { 'Content-Type': ct },
            body: b,
          });
          assert.ok(
            res.status < 500,
            `${m} /${parts.join('/')}${q} answered ${res.status}: ${res.text.slice(0, 200)}`,
          );
        },
      ),
      { seed: 20261122, numRuns: 300 },
    );
    assert.equal((await raw(sim, { path: '/api/v1/nodes/n1' })).status, 200);
  });

  test('survives oversized headers and garbage', async () => {
    // Node's parser refuses headers over its limit: a 431, or the connection closed.
    const outcome = await raw(sim, { path: '/api/v1/nodes', headers: { 'X-Big': 'x'.repeat(100_000) } }).then(
      (r) => r.status,
      (err: NodeJS.ErrnoException) => err.code,
    );
    assert.ok(outcome === 431 || outcome === 'ECONNRESET', String(outcome));
    const garbage = await raw(sim, {
      method: 'PATCH',
      path: '/api/v1/nodes/n1',
      ...json('\u0000\u0001', 'application/merge-patch+json'),
    });
    assert.equal(garbage.status, 400);
    const notObject = await raw(sim, {
      method: 'PATCH',
      path: '/api/v1/nodes/n1',
      ...json('[1,2]', 'application/merge-patch+json'),
    });
    assert.equal(notObject.status, 400);
    for (const depth of [20_000, 1_000_000]) {
      const deep = `{"metadata":{"name":"deep"},"spec":{"taints":${'['.repeat(depth)}${']'.repeat(depth)}}}`;
      const res = await raw(sim, { method: 'POST', path: '/api/v1/nodes', ...json(deep) });
      assert.equal(res.status, 400);
      assert.match(String(res.body['message']), /exceeded max depth of 10000$/);
    }
    const proto = await raw(sim, {
      method: 'POST',
      path: '/api/v1/nodes',
      ...json('{"metadata":{"name":"proto","__proto__":{"x":1}}}'),
    });
    assert.equal(proto.status, 201);
    assert.equal(
      Object.getPrototypeOf(sim.store.get('nodes', undefined, 'proto')?.metadata),
      Object.prototype,
    );
    assert.equal((await raw(sim, { path: '/api/v1/nodes/n1' })).status, 200);
  });
});
