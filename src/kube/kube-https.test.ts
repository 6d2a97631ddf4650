import assert from 'node:assert/strict';
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer } from 'node:https';
import { type AddressInfo, connect, type Socket } from 'node:net';
import { test } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import { ForbiddenError, RateLimitedError, TimeoutError, UnavailableError } from '../errors.ts';
import { createCertificateAuthority, issueServingCertificate } from '../sim/tls.ts';
import { kubeAnswerError, kubeHttps, kubeJson, maxKubeConnections } from './kube-https.ts';

/** An HTTPS server answering with `handler`, and a kubeconfig pointing at it with a bearer token. */
async function serve(
  handler: (req: IncomingMessage, body: string, res: ServerResponse) => void,
  options: { trustedCa?: string } = {},
) {
  const ca = await createCertificateAuthority();
  const serving = await issueServingCertificate(ca);
  const server = createServer({ key: serving.privateKey, cert: serving.certificate }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => handler(req, Buffer.concat(chunks).toString('utf8'), res));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromClusterAndUser(
    {
      name: 'c',
      server: `https://127.0.0.1:${(server.address() as AddressInfo).port}/`,
      caData: Buffer.from(options.trustedCa ?? ca.certificate).toString('base64'),
      skipTLSVerify: false,
    },
    { name: 'u', token: 'the-token' },
  );
  return {
    kubeConfig,
    server,
    close() {
      server.closeAllConnections();
      server.close();
    },
  };
}

test('a create sent on a pooled connection the server dropped while idle is sent again, and reaches the server once', async () => {
  const received: string[] = [];
  let requests = 0;
  const server = await serve((req, body, res) => {
    requests++;
    // Every second request on a connection finds it gone, as after the server's keep-alive timeout.
    if (requests % 2 === 0) {
      req.socket.destroy();
      return;
    }
    assert.equal(req.headers.authorization, 'Bearer the-token');
    assert.equal(req.headers['content-type'], 'application/json');
    received.push(`${req.method} ${req.url} ${body}`);
    res.writeHead(201, { 'content-type': 'application/json' }).end('{}');
  });
  try {
    const call = kubeHttps(server.kubeConfig, { timeoutMs: 5_000 });
    const create = (name: string) =>
      call({ action: 'create', method: 'POST', path: '/api/v1/namespaces/ns/configmaps', body: `"${name}"` });
    assert.equal((await create('a')).status, 201);
    assert.equal((await create('b')).status, 201);
    assert.deepEqual(received, [
      'POST /api/v1/namespaces/ns/configmaps "a"',
      'POST /api/v1/namespaces/ns/configmaps "b"',
    ]);
  } finally {
    server.close();
  }
});

test('no answer within the deadline is a TimeoutError, a refused connection an UnavailableError, each naming the action', async () => {
  const server = await serve(() => {
    // Never answers.
  });
  try {
    const call = kubeHttps(server.kubeConfig, { timeoutMs: 200 });
    await assert.rejects(call({ action: 'read x', method: 'GET', path: '/x' }), (err: unknown) => {
      assert.ok(err instanceof TimeoutError, String(err));
      assert.match(err.message, /^read x: /);
      return true;
    });
  } finally {
    server.close();
  }
  const gone = kubeHttps(server.kubeConfig, { timeoutMs: 2_000 });
  await assert.rejects(gone({ action: 'read y', method: 'GET', path: '/y' }), (err: unknown) => {
    assert.ok(err instanceof UnavailableError && !(err instanceof TimeoutError), String(err));
    assert.match(err.message, /^read y: /);
    return true;
  });
});

test('calls at once share a bounded pool of connections; every call is answered', async () => {
  const sockets = new Set<unknown>();
  const server = await serve((req, _body, res) => {
    sockets.add(req.socket);
    setTimeout(() => res.writeHead(200, { 'content-type': 'application/json' }).end('{}'), 5);
  });
  try {
    const call = kubeHttps(server.kubeConfig, { timeoutMs: 10_000 });
    const answers = await Promise.all(
      Array.from({ length: 4 * maxKubeConnections }, (_, i) =>
        call({ action: `read ${i}`, method: 'GET', path: `/api/v1/nodes/n${i}` }),
      ),
    );
    assert.deepEqual(new Set(answers.map((answer) => answer.status)), new Set([200]));
    assert.ok(sockets.size <= maxKubeConnections, `${sockets.size} connections`);
  } finally {
    server.close();
  }
});

test("a server whose certificate is not from the kubeconfig's CA is refused, though the pool's TLS settings are built once", async () => {
  const other = await createCertificateAuthority();
  let reached = 0;
  const server = await serve(
    (_req, _body, res) => {
      reached++;
      res.writeHead(200).end('{}');
    },
    { trustedCa: other.certificate },
  );
  try {
    const call = kubeHttps(server.kubeConfig, { timeoutMs: 5_000 });
    for (const path of ['/a', '/b']) {
      await assert.rejects(call({ action: 'read', method: 'GET', path }), (err: unknown) => {
        assert.ok(err instanceof UnavailableError, String(err));
        assert.match(err.message, /^read: .*certificate/i);
        return true;
      });
    }
    assert.equal(reached, 0);
  } finally {
    server.close();
  }
});

test("kubeAnswerError: the status's kind, the Status message, the status and the API server's Retry-After kept", () => {
  const answer = (status: number, body: string, headers: Record<string, string> = {}) => ({
    status,
    headers,
    body: Buffer.from(body),
  });
  const throttled = kubeAnswerError(
    answer(429, '{"kind":"Status","message":"slow down"}', { 'retry-after': '7' }),
    'record a proof',
  );
  assert.ok(throttled instanceof RateLimitedError);
  assert.equal(throttled.message, 'record a proof: HTTP 429: slow down');
  assert.equal(throttled.upstreamStatus, 429);
  assert.equal(throttled.retryAfterSeconds, 7);
  const forbidden = kubeAnswerError(answer(403, '{"message":"no"}'), 'patch node n1');
  assert.ok(forbidden instanceof ForbiddenError);
  assert.equal(forbidden.message, 'patch node n1: HTTP 403: no; grant the permission in RBAC');
  assert.match(
    kubeAnswerError(answer(401, ''), 'read').message,
    /HTTP 401; check the kubeconfig credentials$/,
  );
  const failing = kubeAnswerError(answer(500, 'not json'), 'read');
  assert.ok(failing instanceof UnavailableError);
  assert.equal(failing.message, 'read: HTTP 500: not json');
  assert.ok(
    kubeAnswerError(answer(302, ''), 'read') instanceof UnavailableError,
    'a redirect is not followed',
  );
});

test('kubeJson: an answer that is not JSON is the API server being unusable, named, not a SyntaxError', () => {
  const ok = { status: 200, headers: {}, body: Buffer.from('{"kind":"Node"}') };
  assert.deepEqual(kubeJson(ok, 'read node n1'), { kind: 'Node' });
  const page = { status: 200, headers: {}, body: Buffer.from('<html>proxy error</html>') };
  assert.throws(
    () => kubeJson(page, 'read node n1'),
    (err: unknown) =>
      err instanceof UnavailableError &&
      err.message === 'read node n1: HTTP 200 with a body that is not JSON',
  );
});

test('every call names the controller as its User-Agent', async () => {
  let agent: string | undefined;
  const server = await serve((req, _body, res) => {
    agent = req.headers['user-agent'];
    res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
  });
  try {
    await kubeHttps(server.kubeConfig, { timeoutMs: 5_000 })({ action: 'read', method: 'GET', path: '/x' });
    assert.equal(agent, 'kops-controller');
  } finally {
    server.close();
  }
});

test("a plain-HTTP server (kubectl proxy) and a kubeconfig's proxy-url are honoured, as client-node honours them", async () => {
  // `kubectl proxy`: plain HTTP on loopback, which client-node accepts only with insecure-skip-tls-verify.
  const plain = createHttpServer((req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ path: req.url }));
  });
  await new Promise<void>((resolve) => plain.listen(0, '127.0.0.1', resolve));
  const plainConfig = new KubeConfig();
  plainConfig.loadFromClusterAndUser(
    { name: 'c', server: `http://127.0.0.1:${(plain.address() as AddressInfo).port}`, skipTLSVerify: true },
    { name: 'u' },
  );
  // A proxy-url: the call must reach the API server through the proxy's CONNECT, not directly.
  const server = await serve((_req, _body, res) => {
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"through":"proxy"}');
  });
  const tunnels: string[] = [];
  const proxy = createHttpServer();
  proxy.on('connect', (req: IncomingMessage, client: Socket, head: Buffer) => {
    tunnels.push(req.url ?? '');
    const [host, port] = (req.url ?? '').split(':');
    const upstream = connect(Number(port), host, () => {
      client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      upstream.write(head);
      upstream.pipe(client);
      client.pipe(upstream);
    });
    upstream.on('error', () => client.destroy());
    client.on('error', () => upstream.destroy());
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  const proxied = new KubeConfig();
  const cluster = server.kubeConfig.getCurrentCluster();
  assert.ok(cluster);
  proxied.loadFromClusterAndUser(
    { ...cluster, proxyUrl: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}` },
    { name: 'u', token: 'the-token' },
  );
  try {
    const viaPlain = await kubeHttps(plainConfig, { timeoutMs: 5_000 })({
      action: 'read node n1',
      method: 'GET',
      path: '/api/v1/nodes/n1',
    });
    assert.equal(viaPlain.status, 200);
    assert.deepEqual(JSON.parse(viaPlain.body.toString()), { path: '/api/v1/nodes/n1' });
    const viaProxy = await kubeHttps(proxied, { timeoutMs: 5_000 })({
      action: 'read',
      method: 'GET',
      path: '/x',
    });
    assert.equal(viaProxy.body.toString(), '{"through":"proxy"}');
    assert.deepEqual(tunnels, [new URL(cluster.server).host]);
  } finally {
    plain.close();
    proxy.closeAllConnections();
    proxy.close();
    server.close();
  }
});
