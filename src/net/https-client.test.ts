import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import {
  createServer as createHttpServer,
  Agent as HttpAgent,
  type IncomingMessage,
  type ServerResponse,
} from 'node:http';
import { Agent, createServer, type Server } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { InvalidInputError, KopsError, TimeoutError, TooLargeError, UnavailableError } from '../errors.ts';
import {
  createCertificateAuthority,
  issueServingCertificate,
  type SimCertificateAuthority,
} from '../sim/tls.ts';
import { openssl } from '../testing/openssl.ts';
import { type HttpsAnswer, type HttpsRequest, httpsRequest, TlsVerificationError } from './https-client.ts';

let ca: SimCertificateAuthority;
let server: Server;
let base: URL;
/** The server side of each connection, by the path of the request that arrived on it. */
const sockets = new Map<string, Socket>();

/** What the server does with a request, by path. */
const routes: Record<string, (req: IncomingMessage, res: ServerResponse) => void> = {
  '/unavailable': (_req, res) => {
    res.writeHead(503, { 'retry-after': '7', 'content-type': 'application/json' });
    res.end('{"error":{"reason":"busy"}}');
  },
  // More than any limit, and never finished: only the client can end this exchange.
  '/flood': (_req, res) => {
    res.writeHead(200);
    res.write(Buffer.alloc(64 * 1024, 'x'));
  },
  '/silent': () => {},
  '/echo': (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => res.end(Buffer.concat(chunks)));
  },
};

before(async () => {
  ca = await createCertificateAuthority('https-client-ca');
  const serving = await issueServingCertificate(ca);
  server = createServer({ cert: serving.certificate, key: serving.privateKey }, (req, res) => {
    sockets.set(req.url ?? '', req.socket);
    (routes[req.url ?? ''] ?? routes['/silent'])?.(req, res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = new URL(`https://127.0.0.1:${(server.address() as AddressInfo).port}`);
});

after(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

/** Whether the server's end of the connection that carried `path` closes. */
function serverSocketCloses(path: string): Promise<boolean> {
  const socket = sockets.get(path);
  assert.ok(socket, `a request for ${path} arrived`);
  if (socket.destroyed) return Promise.resolve(true);
  return new Promise((resolve) => {
    // Generous: the client destroys its end at once, the close only has to cross loopback.
    const timer = setTimeout(() => resolve(false), 10_000);
    socket.once('close', () => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}

/**
 * What `pending` rejected with, or 'pending' when it is still unsettled after a wait far longer than a
 * loopback exchange takes (and far shorter than the request's own deadline).
 */
async function settledWithin(pending: Promise<unknown>): Promise<unknown> {
  let timer: NodeJS.Timeout | undefined;
  const wait = new Promise((resolve) => {
    timer = setTimeout(() => resolve('pending'), 10_000);
  });
  try {
    return await Promise.race([
      pending.then(
        (answer) => ({ answer }),
        (err: unknown) => err,
      ),
      wait,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

const at = (path: string) => new URL(path, base);

/** A request for `path` on a connection of its own, trusting the test CA, with `changes` applied. */
function send(path: string, changes: Partial<HttpsRequest> = {}): Promise<HttpsAnswer> {
  return httpsRequest({
    url: at(path),
    ca: ca.certificate,
    agent: false,
    timeoutMs: 10_000,
    maxBodyBytes: 1024,
    ...changes,
  });
}

test('an answer of any status is returned with its headers and body, not thrown', async () => {
  const answer = await send('/unavailable');
  assert.equal(answer.status, 503);
  assert.equal(answer.headers['retry-after'], '7');
  assert.deepEqual(JSON.parse(answer.body.toString()), { error: { reason: 'busy' } });
});

test('the method and body are sent as given', async () => {
  const answer = await send('/echo', { method: 'POST', body: 'the body' });
  assert.equal(answer.status, 200);
  assert.equal(answer.body.toString(), 'the body');
});

test("a body is framed by its length whatever the method: a GET's body does not become the next request on its connection", async () => {
  // Node's client sends a GET's or a DELETE's body with neither a length nor chunking; on a kept-alive
  // connection the server would read those bytes as the start of the next request.
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  try {
    const first = await send('/echo', { method: 'GET', body: 'stray', agent });
    assert.equal(first.body.toString(), 'stray');
    const next = await send('/unavailable', { agent });
    assert.equal(next.status, 503);
    assert.equal(sockets.get('/unavailable'), sockets.get('/echo'), 'both went over one connection');
  } finally {
    agent.destroy();
  }
});

test('an answer over the size limit is a TooLargeError at once, and its connection is destroyed', async () => {
  const outcome = await settledWithin(send('/flood', { timeoutMs: 120_000 }));
  assert.ok(outcome instanceof TooLargeError, `rejected with TooLargeError, not ${String(outcome)}`);
  assert.match(outcome.message, /exceeds 1024 bytes/);
  assert.equal(await serverSocketCloses('/flood'), true);
});

test('an answer over the size limit that arrives whole in one read is a TooLargeError too: never resolved, never an uncaught error on a pooled socket', async () => {
  // Plain HTTP on loopback: a 3,000-byte answer is in the client's first read, headers and all, so
  // the limit is crossed only as the message ends.
  const plain = createHttpServer((_req, res) => {
    res.writeHead(200, { 'content-length': 3000 });
    res.end(Buffer.alloc(3000, 0x41));
  });
  await new Promise<void>((resolve) => plain.listen(0, '127.0.0.1', resolve));
  const url = new URL(`http://127.0.0.1:${(plain.address() as AddressInfo).port}/`);
  const pooled = new HttpAgent({ keepAlive: true });
  try {
    for (const agent of [false, pooled, undefined] as const) {
      const outcome = await settledWithin(
        httpsRequest({ url, agent, timeoutMs: 2_000, maxBodyBytes: 1_000 }),
      );
      assert.ok(outcome instanceof TooLargeError, `agent ${String(agent)}: ${String(outcome)}`);
    }
    // An error emitted on a pooled socket with no listener would have ended this process by now.
    await new Promise((resolve) => setTimeout(resolve, 100));
  } finally {
    pooled.destroy();
    plain.close();
  }
});

test('no answer within the deadline is a TimeoutError and the connection is destroyed', async () => {
  const outcome = await settledWithin(send('/silent', { timeoutMs: 200 }));
  assert.ok(outcome instanceof TimeoutError, `rejected with TimeoutError, not ${String(outcome)}`);
  assert.match(outcome.message, /no answer within 200 ms/);
  assert.equal(await serverSocketCloses('/silent'), true);
});

test('a certificate that does not verify is a TlsVerificationError (final), not a network fault', async () => {
  const stranger = await createCertificateAuthority('another-ca');
  await assert.rejects(
    send('/unavailable', { ca: stranger.certificate }),
    (err) =>
      err instanceof TlsVerificationError &&
      err.kind === 'forbidden' &&
      /^(SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_VERIFY_LEAF_SIGNATURE|UNABLE_TO_GET_ISSUER_CERT_LOCALLY)$/.test(
        err.code,
      ),
  );
});

test('certificates Node reports as UNSPECIFIED (an unknown critical extension, a CA that may not sign certificates, SHA-1) are TlsVerificationErrors too', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'tls-unspecified-'));
  const at = (name: string) => join(dir, name);
  // A new P-256 key in `<name>.key`, and its self-signed certificate or its CSR.
  const newKey = (name: string, ...rest: string[]) =>
    openssl([
      'req',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:P-256',
      '-nodes',
      '-keyout',
      at(`${name}.key`),
      ...rest,
    ]);
  const ca = (name: string, keyUsage: string) =>
    newKey(
      name,
      '-x509',
      '-out',
      at(`${name}.crt`),
      '-days',
      '2',
      '-subj',
      `/CN=${name}`,
      '-addext',
      'basicConstraints=critical,CA:TRUE',
      '-addext',
      `keyUsage=critical,${keyUsage}`,
    );
  const leaf = (name: string, issuer: string, extensions: string, digest = '-sha256') => {
    writeFileSync(
      at(`${name}.ext`),
      `subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n${extensions}`,
    );
    newKey(name, '-out', at(`${name}.csr`), '-subj', '/CN=localhost');
    const signer = ['-CA', at(`${issuer}.crt`), '-CAkey', at(`${issuer}.key`), '-CAcreateserial'];
    openssl([
      'x509',
      '-req',
      '-in',
      at(`${name}.csr`),
      ...signer,
      '-out',
      at(`${name}.crt`),
      '-days',
      '1',
      '-extfile',
      at(`${name}.ext`),
      digest,
    ]);
  };
  try {
    ca('ca', 'keyCertSign,cRLSign');
    ca('ca-nosign', 'digitalSignature');
    leaf('critical', 'ca', '1.2.3.4.5.6.7=critical,DER:05:00\n');
    leaf('nosign', 'ca-nosign', '');
    leaf('sha1', 'ca', '', '-sha1');
    for (const [name, issuer] of [
      ['critical', 'ca'],
      ['nosign', 'ca-nosign'],
      ['sha1', 'ca'],
    ] as const) {
      const server = createServer(
        { key: readFileSync(at(`${name}.key`)), cert: readFileSync(at(`${name}.crt`)) },
        (_req, res) => res.end('ok'),
      );
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      try {
        const url = new URL(`https://127.0.0.1:${(server.address() as AddressInfo).port}/`);
        const outcome = await settledWithin(
          httpsRequest({
            url,
            ca: readFileSync(at(`${issuer}.crt`), 'utf8'),
            agent: false,
            timeoutMs: 5_000,
            maxBodyBytes: 100,
          }),
        );
        assert.ok(outcome instanceof TlsVerificationError, `${name}: ${String(outcome)}`);
      } finally {
        server.close();
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('an aborted signal ends the request with its AbortError', async () => {
  const controller = new AbortController();
  const pending = send('/silent', { timeoutMs: 30_000, signal: controller.signal });
  controller.abort();
  await assert.rejects(
    pending,
    (err) => err instanceof Error && err.name === 'AbortError' && !(err instanceof KopsError),
  );
});

test('a refused connection is an UnavailableError', async () => {
  const closed = createServer();
  await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
  const port = (closed.address() as AddressInfo).port;
  await new Promise((resolve) => closed.close(resolve));
  await assert.rejects(
    send('/', { url: new URL(`https://127.0.0.1:${port}/`) }),
    (err) => err instanceof UnavailableError && /ECONNREFUSED/.test(err.message),
  );
});

test('a header Node cannot send is an InvalidInputError, not a crash', async () => {
  await assert.rejects(
    send('/echo', { headers: { 'x-proof': 'a\r\nb' } }),
    (err) => err instanceof InvalidInputError && /cannot be sent/.test(err.message),
  );
});
