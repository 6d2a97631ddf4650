import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { Agent, request } from 'node:https';
import { connect as netConnect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, mock, test } from 'node:test';
import { connect } from 'node:tls';
import { createCertificateAuthority, issueServingCertificate, type SimKeyPair } from '../sim/tls.ts';
import { capturedLogger } from '../testing/log-capture.ts';
import {
  type Admission,
  type ConnectionGate,
  defaultConnectionLimits,
  type HardenedServerOptions,
  openFileLimit,
  startHardenedServer,
} from './hardened-server.ts';
import { readBody } from './read-body.ts';
import { eventually, idleCrowd } from './testing.ts';

describe('hardened server', () => {
  let dir: string;
  let caPem: string;
  let serving: SimKeyPair;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'hardened-server-'));
    const ca = await createCertificateAuthority();
    caPem = ca.certificate;
    serving = await issueServingCertificate(ca);
  });
  after(() => rm(dir, { recursive: true, force: true }));

  const tls = () => ({ key: serving.privateKey, cert: serving.certificate });

  /** A hardened server on a loopback port, named `test`, with the given handler and settings. */
  const testServer = (options: Omit<HardenedServerOptions, 'name' | 'listen' | 'listenSetting'>) =>
    startHardenedServer({ name: 'test', listen: '127.0.0.1:0', listenSetting: 'test.listen', ...options });

  test('the defaults are within the bounds the product promises', () => {
    assert.ok(defaultConnectionLimits.handshakeTimeout <= 10_000);
    assert.ok(defaultConnectionLimits.keepAliveTimeout <= 30_000);
    assert.ok(defaultConnectionLimits.headersTimeout <= 10_000);
  });

  test('a TLS connection that completes its handshake and then sends nothing is closed after the idle timeout', async () => {
    const server = await testServer({
      tls: tls(),
      limits: { keepAliveTimeout: 300 },
      handler: (_req, res) => res.end('ok'),
    });
    try {
      const closed = await new Promise<{ handshaken: boolean; received: string }>((resolve, reject) => {
        let handshaken = false;
        let received = '';
        const socket = connect({ host: '127.0.0.1', port: server.address.port, ca: caPem }, () => {
          handshaken = true;
        });
        socket.on('data', (chunk: Buffer) => (received += chunk));
        socket.on('error', reject);
        socket.on('close', () => resolve({ handshaken, received }));
      });
      assert.deepEqual(closed, { handshaken: true, received: '' });
      assert.equal(await eventually(() => server.openConnections(), 0), 0);
    } finally {
      await server.close();
    }
  });

  test('a request whose answer takes longer than the idle timeout (a long-poll) is answered', async () => {
    const server = await testServer({
      tls: tls(),
      limits: { keepAliveTimeout: 200 },
      handler: (_req, res) => {
        setTimeout(() => res.end('late'), 1_000);
      },
    });
    try {
      const answer = await new Promise<string>((resolve, reject) => {
        request(`${server.url}/`, { ca: caPem, agent: false }, (res) => {
          let text = '';
          res.on('data', (chunk: Buffer) => (text += chunk));
          res.on('end', () => resolve(text));
        })
          .on('error', reject)
          .end();
      });
      assert.equal(answer, 'late');
    } finally {
      await server.close();
    }
  });

  for (const secure of [false, true]) {
    test(`attack (${secure ? 'TLS' : 'plain'}): a client that sends requests and never reads the answers is cut once an answer has waited past the response timeout`, async () => {
      // Answers far larger than the kernel's socket buffers, so that a client that does not read
      // stalls the server's writes (a zero TCP window): no read, no idle timer, no finished answer.
      const body = Buffer.alloc(16 * 1024 * 1024, 'x');
      const server = await testServer({
        ...(secure ? { tls: tls() } : {}),
        limits: { responseTimeout: 500 },
        handler: (_req, res) => res.end(body),
      });
      const clients: Socket[] = [];
      try {
        for (let i = 0; i < 3; i++) {
          const socket: Socket = secure
            ? connect({ host: '127.0.0.1', port: server.address.port, ca: caPem })
            : (await import('node:net')).connect(server.address.port, '127.0.0.1');
          socket.on('error', () => undefined);
          // Pipelined requests, then no read at all.
          socket.write('GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n');
          socket.pause();
          clients.push(socket);
        }
        assert.equal(await eventually(() => server.openConnections(), 3), 3);
        const cut = await eventually(() => server.openConnections(), 0, 5_000);
        assert.equal(cut, 0, 'connections whose answers nobody takes are still held');
      } finally {
        for (const socket of clients) socket.destroy();
        await server.close();
      }
    });
  }

  test('a request answered before its body arrived, whose body then stalls, gets no second (408) answer on its connection', async () => {
    const server = await testServer({
      limits: { requestTimeout: 300, headersTimeout: 300 },
      handler: (_req, res) => {
        res.writeHead(405, { 'content-type': 'application/json' });
        res.end('{"error":"method-not-allowed"}');
      },
    });
    try {
      const socket = (await import('node:net')).connect(server.address.port, '127.0.0.1');
      let received = '';
      socket.on('data', (chunk: Buffer) => (received += chunk));
      socket.on('error', () => undefined);
      // A body of 100 bytes announced, 5 sent, then a byte now and then: never complete.
      socket.write('PUT / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"a":');
      const drip = setInterval(() => socket.write(' '), 100);
      await new Promise((resolve) => socket.on('close', resolve));
      clearInterval(drip);
      assert.deepEqual(received.match(/HTTP\/1\.1 \d{3}/g), ['HTTP/1.1 405']);
    } finally {
      await server.close();
    }
  });

  /**
   * Opens a connection (TLS or plain), writes `request`, optionally half-closes (FIN after the
   * request, still reading), and resolves with everything the server sent until it closed.
   */
  function rawExchange(
    port: number,
    secure: boolean,
    request: string,
    halfClose = false,
  ): Promise<{ received: string; statuses: string[] }> {
    return new Promise((resolve, reject) => {
      const onOpen = () => {
        socket.write(request);
        if (halfClose) socket.end();
      };
      const socket: Socket = secure
        ? connect({ host: '127.0.0.1', port, ca: caPem }, onOpen)
        : netConnect(port, '127.0.0.1', onOpen);
      let received = '';
      socket.on('data', (chunk: Buffer) => (received += chunk.toString('latin1')));
      socket.on('error', reject);
      socket.on('close', () => resolve({ received, statuses: received.match(/HTTP\/1\.1 \d{3}/g) ?? [] }));
    });
  }

  for (const secure of [false, true]) {
    test(`attack (${secure ? 'TLS' : 'plain'}): bytes that are not HTTP after a request whose answer is pending do not take its place: the answer goes out first, then the 400, then the close`, async () => {
      let answered = 0;
      const server = await testServer({
        ...(secure ? { tls: tls() } : {}),
        // A request that takes a while to decide, as a policy calling its cloud does.
        handler: (req, res) => {
          req.resume();
          req.on('end', () =>
            setTimeout(() => {
              answered += 1;
              res.end(`answer to ${req.method} ${req.url}`);
            }, 200),
          );
        },
      });
      try {
        // A body longer than its Content-Length: the rest is parsed as the next request, and is not HTTP.
        const { received, statuses } = await rawExchange(
          server.address.port,
          secure,
          'POST /join HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}GARBAGE\r\n\r\n',
        );
        assert.deepEqual(statuses, ['HTTP/1.1 200', 'HTTP/1.1 400'], received);
        assert.match(received, /answer to POST \/join/);
        assert.equal(answered, 1);
        assert.equal(await eventually(() => server.openConnections(), 0), 0);
      } finally {
        await server.close();
      }
    });

    test(`attack (${secure ? 'TLS' : 'plain'}): a pipelined request cut off by a half-close after a whole request whose answer is pending: that answer goes out first`, async () => {
      let answered = 0;
      const server = await testServer({
        ...(secure ? { tls: tls() } : {}),
        handler: (req, res) => {
          req.resume();
          req.on('end', () =>
            setTimeout(() => {
              answered += 1;
              res.end(`answer to ${req.url}`);
            }, 200),
          );
        },
      });
      try {
        const { received, statuses } = await rawExchange(
          server.address.port,
          secure,
          'POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}' +
            'POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{"x',
          true,
        );
        assert.equal(statuses[0], 'HTTP/1.1 200', received);
        assert.match(received, /answer to \/a/);
        assert.equal(answered, 1);
        assert.equal(await eventually(() => server.openConnections(), 0), 0);
      } finally {
        await server.close();
      }
    });

    test(`attack (${secure ? 'TLS' : 'plain'}): a client refused for bytes that are not HTTP, that keeps sending and never closes, cannot hold its connection`, async () => {
      const server = await testServer({
        ...(secure ? { tls: tls() } : {}),
        limits: { keepAliveTimeout: 60_000 },
        handler: (req, res) => {
          req.resume();
          req.on('end', () => setTimeout(() => res.end('answer'), 200));
        },
      });
      try {
        for (const text of [
          'GARBAGE\r\n\r\n',
          'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}GARBAGE\r\n\r\n',
        ]) {
          // Half-open allowed: the client does not close when the server does; only the server can.
          const tcp = netConnect({ port: server.address.port, host: '127.0.0.1', allowHalfOpen: true });
          const socket: Socket = secure ? connect({ socket: tcp, host: '127.0.0.1', ca: caPem }) : tcp;
          socket.on('error', () => undefined);
          socket.on('data', () => undefined);
          socket.write(text);
          // A byte every 50 ms, for ever: the idle timer never fires.
          const drip = setInterval(() => socket.writable && socket.write('z'), 50);
          const closed = new Promise((resolve) => socket.once('close', () => resolve(true)));
          const closedInTime = await Promise.race([
            closed,
            new Promise((resolve) => setTimeout(resolve, 2_000, false)),
          ]);
          clearInterval(drip);
          socket.destroy();
          assert.ok(closedInTime, `the connection of ${JSON.stringify(text)} was still open after 2 s`);
        }
        assert.equal(await eventually(() => server.openConnections(), 0), 0);
      } finally {
        await server.close();
      }
    });

    test(`a client (${secure ? 'TLS' : 'plain'}) that half-closes its connection after its request still gets its answer, then the connection closes`, async () => {
      const server = await testServer({
        ...(secure ? { tls: tls() } : {}),
        handler: (req, res) => {
          req.resume();
          req.on('end', () => setTimeout(() => res.end('late answer'), 200));
        },
      });
      try {
        const { received, statuses } = await rawExchange(
          server.address.port,
          secure,
          'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}',
          true,
        );
        assert.deepEqual(statuses, ['HTTP/1.1 200'], received);
        assert.match(received, /late answer$/);
        // Half-closed while idle, or in the middle of its headers: closed as before.
        const idle = await rawExchange(server.address.port, secure, '', true);
        assert.equal(idle.received, '');
        const partial = await rawExchange(server.address.port, secure, 'GET / HTTP/1.1\r\nHo', true);
        assert.deepEqual(partial.statuses, ['HTTP/1.1 400']);
        assert.equal(await eventually(() => server.openConnections(), 0), 0);
      } finally {
        await server.close();
      }
    });
  }

  test('headers that stall on a kept-alive connection after an answered request still get their 408', async () => {
    const server = await testServer({
      limits: { requestTimeout: 300, headersTimeout: 300, keepAliveTimeout: 5_000 },
      handler: (_req, res) => res.end('ok'),
    });
    try {
      const socket = (await import('node:net')).connect(server.address.port, '127.0.0.1');
      let received = '';
      socket.on('data', (chunk: Buffer) => (received += chunk));
      socket.write('GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHo');
      const drip = setInterval(() => socket.write('o'), 100);
      await new Promise((resolve) => socket.on('close', resolve));
      clearInterval(drip);
      assert.deepEqual(received.match(/HTTP\/1\.1 \d{3}/g), ['HTTP/1.1 200', 'HTTP/1.1 408']);
    } finally {
      await server.close();
    }
  });

  test('an answer a client takes slowly but wholly within the response timeout is delivered whole', async () => {
    const body = Buffer.alloc(8 * 1024 * 1024, 'y');
    const server = await testServer({
      limits: { responseTimeout: 5_000 },
      handler: (_req, res) => res.end(body),
    });
    try {
      const socket = (await import('node:net')).connect(server.address.port, '127.0.0.1');
      socket.write('GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
      socket.pause();
      // Not read for a second (the server's writes stall), then read whole.
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      let received = 0;
      socket.on('data', (chunk: Buffer) => (received += chunk.length));
      socket.resume();
      await new Promise((resolve) => socket.on('close', resolve));
      assert.ok(received > body.length, `received ${received} bytes`);
    } finally {
      await server.close();
    }
  });

  test('close cuts connections waiting for their first bytes and idle kept-alive ones; the count drops to zero', async () => {
    const server = await testServer({
      tls: tls(),
      limits: { keepAliveTimeout: 60_000 },
      handler: (_req, res) => res.end('ok'),
    });
    const agent = new Agent({ keepAlive: true });
    const kept = await new Promise<Socket>((resolve, reject) => {
      request(`${server.url}/`, { ca: caPem, agent }, (res) => {
        const { socket } = res;
        res.resume();
        res.on('end', () => resolve(socket));
      })
        .on('error', reject)
        .end();
    });
    const keptClosed = new Promise((resolve) => kept.once('close', resolve));
    const crowd = await idleCrowd(server.address.port, 20, ['127.0.0.5']);
    assert.equal(await eventually(() => server.openConnections(), 21), 21);
    await server.close();
    await crowd.settled(5_000);
    assert.equal(crowd.open().length, 0);
    assert.ok(crowd.sockets.every((s) => !s.closedByUs));
    await keptClosed;
    assert.equal(server.openConnections(), 0);
    agent.destroy();
  });

  test('clients that reset or close before their first byte leave nothing behind', async () => {
    const server = await testServer({
      tls: tls(),
      limits: { maxConnectionsPerSource: 1_000 },
      handler: (_req, res) => res.end('ok'),
    });
    try {
      for (const close of ['reset', 'end'] as const) {
        const crowd = await idleCrowd(server.address.port, 200, ['127.0.0.6', '127.0.0.7']);
        assert.equal(await eventually(() => server.openConnections(), 200), 200);
        for (const { socket } of crowd.sockets) {
          if (close === 'reset') socket.resetAndDestroy();
          else socket.end();
        }
        assert.equal(await eventually(() => server.openConnections(), 0), 0, close);
      }
      const answer = await new Promise<number>((resolve, reject) => {
        request(`${server.url}/`, { ca: caPem, agent: false }, (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        })
          .on('error', reject)
          .end();
      });
      assert.equal(answer, 200);
    } finally {
      await server.close();
    }
  });

  test('a gate that answers later: the connection waits unread, is served once admitted, reset when refused, and released when it closes', async () => {
    const asked: string[] = [];
    const released: string[] = [];
    const answers: ((admission: Admission) => void)[] = [];
    const gate: ConnectionGate = {
      admit: (source) => {
        asked.push(source);
        return new Promise<Admission>((resolve) => answers.push(resolve));
      },
      release: (source) => released.push(source),
    };
    const server = await testServer({
      tls: tls(),
      gate,
      handler: (_req, res) => res.end('ok'),
    });
    const agent = new Agent({ keepAlive: false });
    const get = () =>
      new Promise<string>((resolve) => {
        const req = request(`${server.url}/`, { agent, ca: caPem }, (res) => {
          let text = '';
          res.on('data', (chunk: Buffer) => (text += chunk));
          res.on('end', () => resolve(text));
        });
        req.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
        req.end();
      });
    try {
      const admitted = get();
      await eventually(() => answers.length, 1);
      assert.deepEqual(asked, ['127.0.0.1']);
      (answers.shift() as (admission: Admission) => void)('admitted');
      assert.equal(await admitted, 'ok');
      assert.deepEqual(await eventually(() => released.length, 1), 1, 'released once, when it closed');
      const refused = get();
      await eventually(() => answers.length, 1);
      (answers.shift() as (admission: Admission) => void)('per-source');
      assert.equal(await refused, 'ECONNRESET');
      assert.equal(released.length, 1, 'a refused connection was never held, so never released');
    } finally {
      agent.destroy();
      await server.close();
    }
  });

  test('an IPv6 connection counts against its /64, not its own address', async () => {
    // One host commonly holds a whole /64: keyed by address, it would pass as 2^64 sources.
    const asked: string[] = [];
    const released: string[] = [];
    const gate: ConnectionGate = {
      admit: (source) => {
        asked.push(source);
        return 'admitted';
      },
      release: (source) => released.push(source),
    };
    const server = await startHardenedServer({
      name: 'test',
      listen: '[::1]:0',
      listenSetting: 'test.listen',
      tls: tls(),
      gate,
      handler: (_req, res) => res.end('ok'),
    });
    try {
      const text = await new Promise<string>((resolve, reject) => {
        const req = request(`${server.url}/`, { ca: caPem, agent: false }, (res) => {
          let body = '';
          res.on('data', (chunk: Buffer) => (body += chunk));
          res.on('end', () => resolve(body));
        });
        req.on('error', reject);
        req.end();
      });
      assert.equal(text, 'ok');
      assert.deepEqual(asked, ['::/64']);
      assert.deepEqual(await eventually(() => released.length, 1), 1);
      assert.deepEqual(released, ['::/64'], 'released under the key it was admitted under');
    } finally {
      await server.close();
    }
  });

  test('the refusal warning, at most once a minute, is timed on the monotonic clock: a wall clock stepped back does not silence it', async () => {
    const { logger, lines } = capturedLogger({ level: 'warn' });
    const server = await testServer({
      tls: tls(),
      gate: { admit: () => 'per-source', release: () => {} },
      handler: (_req, res) => res.end('ok'),
      logger,
    });
    const realDate = Date.now;
    const realMonotonic = performance.now.bind(performance);
    let wallOffset = 3_600_000; // an hour ahead at the first refusal
    let monotonicOffset = 0;
    const wall = mock.method(Date, 'now', () => realDate() + wallOffset);
    const monotonic = mock.method(performance, 'now', () => realMonotonic() + monotonicOffset);
    const refused = () =>
      new Promise<void>((resolve) => {
        request(`${server.url}/`, { agent: false, ca: caPem }, () => resolve())
          .on('error', () => resolve())
          .end();
      });
    try {
      await refused();
      assert.equal(await eventually(() => lines.length, 1), 1);
      wallOffset = 0; // NTP steps the clock back; a minute and a second pass
      monotonicOffset = 61_000;
      await refused();
      assert.equal(await eventually(() => lines.length, 2), 2, 'warned again a minute later');
    } finally {
      wall.mock.restore();
      monotonic.mock.restore();
      await server.close();
    }
    assert.match(
      String((JSON.parse(lines[1] as string) as Record<string, unknown>)['msg']),
      /refusing connections/,
    );
  });

  test('warns at start when the connection cap is not below the open-file limit', async () => {
    const { logger, lines } = capturedLogger({ level: 'warn' });
    const server = await testServer({
      limits: { maxConnections: 100_000_000 },
      handler: (_req, res) => res.end('ok'),
      logger,
    });
    await server.close();
    const limit = openFileLimit();
    assert.ok(limit !== undefined && limit > 0, 'Linux reports the limit');
    assert.equal(lines.length, 1);
    const record = JSON.parse(lines[0] as string) as Record<string, unknown>;
    assert.equal(record['openFileLimit'], limit);
    assert.match(String(record['msg']), /not below the open-file limit \(ulimit -n\)/);
  });

  test('openFileLimit reads the soft limit, and says nothing without /proc', () => {
    const file = join(dir, 'limits');
    writeFileSync(
      file,
      'Limit                     Soft Limit           Hard Limit           Units\n' +
        'Max open files            1024                 524288               files\n',
    );
    assert.equal(openFileLimit(file), 1024);
    assert.equal(openFileLimit(join(dir, 'none')), undefined);
  });

  describe("the refusals Node's HTTP parser makes carry the JSON error object", () => {
    /** The JSON body of the one answer in `received`, with its status and headers (lower-cased names). */
    function parseOne(received: string): { status: number; headers: Record<string, string>; body: unknown } {
      const [head = '', body = ''] = received.split('\r\n\r\n', 2);
      const [statusLine = '', ...lines] = head.split('\r\n');
      const headers: Record<string, string> = {};
      for (const line of lines) {
        const colon = line.indexOf(':');
        headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
      }
      assert.equal(
        Number(headers['content-length']),
        Buffer.byteLength(body),
        'the body is framed by its length',
      );
      return { status: Number(statusLine.split(' ')[1]), headers, body: JSON.parse(body) };
    }

    const cases = [
      {
        name: 'ambiguous framing (Content-Length and Transfer-Encoding)',
        request:
          'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n',
        status: 400,
        reason: 'malformed-request',
      },
      {
        name: 'headers over the size limit',
        request: `GET / HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`,
        status: 431,
        reason: 'headers-too-large',
      },
      {
        name: 'an HTTP/1.1 request without Host',
        request: 'GET / HTTP/1.1\r\n\r\n',
        status: 400,
        reason: 'missing-host',
      },
      {
        name: 'an expectation other than 100-continue',
        request: 'POST / HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\nContent-Length: 2\r\n\r\n{}',
        status: 417,
        reason: 'unsupported-expectation',
      },
    ];
    for (const secure of [false, true]) {
      for (const c of cases) {
        test(`(${secure ? 'TLS' : 'plain'}) ${c.name}: ${c.status} with reason ${c.reason}, then the close; the handler never runs`, async () => {
          let handled = 0;
          const server = await testServer({
            ...(secure ? { tls: tls() } : {}),
            handler: (_req, res) => {
              handled += 1;
              res.end('ok');
            },
          });
          try {
            const { received, statuses } = await rawExchange(server.address.port, secure, c.request);
            assert.deepEqual(statuses, [`HTTP/1.1 ${c.status}`]);
            const answer = parseOne(received);
            assert.equal(answer.status, c.status);
            assert.equal(answer.headers['content-type'], 'application/json');
            assert.equal(answer.headers['connection'], 'close');
            const error = (answer.body as { error: { reason: string; message: string } }).error;
            assert.equal(error.reason, c.reason);
            assert.ok(error.message.length > 0);
            assert.equal(handled, 0);
          } finally {
            await server.close();
          }
        });
      }
    }

    test('a request too slow to send its headers gets 408 with reason request-timeout', async () => {
      const server = await testServer({
        limits: { headersTimeout: 200, requestTimeout: 200 },
        handler: (_req, res) => res.end('ok'),
      });
      try {
        const { received, statuses } = await rawExchange(server.address.port, false, 'GET / HTTP/1.1\r\nHo');
        assert.deepEqual(statuses, ['HTTP/1.1 408']);
        const error = (parseOne(received).body as { error: { reason: string } }).error;
        assert.equal(error.reason, 'request-timeout');
      } finally {
        await server.close();
      }
    });
  });

  describe('Expect: 100-continue', () => {
    /** A server whose handler refuses PUT on its headers and reads the body of anything else. */
    async function continueServer() {
      const bodies: string[] = [];
      const server = await testServer({
        handler: (req, res) => {
          if (req.method === 'PUT') {
            res.writeHead(405, { 'content-type': 'application/json', allow: 'POST' });
            res.end('{"error":{"reason":"method-not-allowed","message":"POST only"}}');
            return;
          }
          readBody(req, 1024).then(
            (body) => {
              bodies.push(body.toString());
              res.end('read');
            },
            () => res.destroy(),
          );
        },
      });
      return { server, bodies };
    }

    /** Sends the head, waits for the server's first answer line, and reports it; sends the body after a 100. */
    function expectExchange(port: number, head: string, body: string): Promise<string> {
      return new Promise((resolve, reject) => {
        const socket = netConnect(port, '127.0.0.1', () => socket.write(head));
        let received = '';
        socket.on('data', (chunk: Buffer) => {
          const before = received;
          received += chunk.toString('latin1');
          if (!before.includes('100 Continue') && received.includes('HTTP/1.1 100 Continue\r\n\r\n'))
            socket.write(body);
        });
        socket.on('error', reject);
        socket.on('close', () => resolve(received));
        // A client that got its final answer instead of a 100 sends no body and closes.
        setTimeout(() => socket.end(), 500).unref();
      });
    }

    test('a request its handler refuses on its headers gets its refusal, never 100 Continue, so the client keeps its body', async () => {
      const { server, bodies } = await continueServer();
      try {
        const received = await expectExchange(
          server.address.port,
          'PUT / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n',
          '{}',
        );
        assert.deepEqual(received.match(/HTTP\/1\.1 \d{3}/g), ['HTTP/1.1 405']);
        assert.deepEqual(bodies, []);
      } finally {
        await server.close();
      }
    });

    test('a request whose handler reads its body gets 100 Continue first, then its answer', async () => {
      const { server, bodies } = await continueServer();
      try {
        const received = await expectExchange(
          server.address.port,
          'POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\nConnection: close\r\n\r\n',
          '{}',
        );
        assert.deepEqual(received.match(/HTTP\/1\.1 \d{3}/g), ['HTTP/1.1 100', 'HTTP/1.1 200']);
        assert.deepEqual(bodies, ['{}']);
      } finally {
        await server.close();
      }
    });
  });
});
