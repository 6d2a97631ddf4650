import assert from 'node:assert/strict';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import { ForbiddenError, RateLimitedError, TimeoutError, UnavailableError } from '../errors.ts';
import { createCertificateAuthority, issueServingCertificate } from '../sim/tls.ts';
import { kubeAnswerError, kubeHttps, maxKubeConnections } from './kube-https.ts';

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
  assert.ok(kubeAnswerError(answer(403, '{"message":"no"}'), 'read') instanceof ForbiddenError);
  const failing = kubeAnswerError(answer(500, 'not json'), 'read');
  assert.ok(failing instanceof UnavailableError);
  assert.equal(failing.message, 'read: HTTP 500: not json');
  assert.ok(
    kubeAnswerError(answer(302, ''), 'read') instanceof UnavailableError,
    'a redirect is not followed',
  );
});
