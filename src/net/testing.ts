/**
 * Test helpers for the servers' connection defences: crowds of real idle sockets from several
 * loopback addresses, a port held by a real listener, and `openssl s_client` probes of a TLS policy.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { connect, createServer, type Socket } from 'node:net';
import { openFileLimit } from './hardened-server.ts';

/** One raw TCP connection of a crowd, and what became of it. */
export interface CrowdSocket {
  socket: Socket;
  source: string;
  /** Whether the connection was established before anything closed it. */
  connected: boolean;
  /** Milliseconds from the start of the crowd until the connection closed, while still open: undefined. */
  closedAfterMs: number | undefined;
  /** Whether this side closed it ({@link Crowd.release}); false means the server did. */
  closedByUs: boolean;
}

/** Idle connections that never send a byte. */
export interface Crowd {
  sockets: CrowdSocket[];
  /** The sockets still open. */
  open(): CrowdSocket[];
  /** Resolves once every socket has closed, or after `timeoutMs` (then some are still open). */
  settled(timeoutMs: number): Promise<void>;
  /** Closes every socket still open. */
  release(): Promise<void>;
}

/**
 * Opens `count` TCP connections to 127.0.0.1:`port`, spread evenly over the loopback `sources`
 * (e.g. 127.0.0.2), and sends nothing on them. Resolves once each has connected or failed.
 */
export async function idleCrowd(port: number, count: number, sources: readonly string[]): Promise<Crowd> {
  // Both ends of every connection may be in this process, the server's included.
  const needed = 2 * count + 256;
  const limit = openFileLimit();
  if (limit !== undefined && limit < needed) {
    throw new Error(`${count} connections need ulimit -n of at least ${needed}; this process has ${limit}`);
  }
  const started = Date.now();
  const sockets: CrowdSocket[] = [];
  // Connect in slices, so the listen backlog never overflows into SYN retries that take seconds.
  for (let first = 0; first < count; first += 250) {
    const slice = Array.from({ length: Math.min(250, count - first) }, (_, i) => {
      const source = sources[(first + i) % sources.length] as string;
      const entry: CrowdSocket = {
        socket: connect({ port, host: '127.0.0.1', localAddress: source }),
        source,
        connected: false,
        closedAfterMs: undefined,
        closedByUs: false,
      };
      sockets.push(entry);
      return new Promise<void>((resolve) => {
        entry.socket.once('connect', () => {
          entry.connected = true;
          resolve();
        });
        entry.socket.on('error', () => resolve());
        entry.socket.once('close', () => {
          entry.closedAfterMs = Date.now() - started;
          resolve();
        });
      });
    });
    await Promise.all(slice);
  }
  const open = () => sockets.filter((s) => s.closedAfterMs === undefined);
  return {
    sockets,
    open,
    async settled(timeoutMs) {
      for (let waited = 0; waited < timeoutMs && open().length > 0; waited += 50) {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    },
    async release() {
      const closing = open().map(
        (s) =>
          new Promise<void>((resolve) => {
            s.closedByUs = true;
            s.socket.once('close', () => resolve());
            s.socket.destroy();
          }),
      );
      await Promise.all(closing);
    },
  };
}

/** Waits (bounded) until `read()` returns `expected`, and returns the last value read. */
export async function eventually<T>(read: () => T | Promise<T>, expected: T, timeoutMs = 10_000): Promise<T> {
  let value = await read();
  for (let waited = 0; waited < timeoutMs && value !== expected; waited += 20) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    value = await read();
  }
  return value;
}

/** A real listener on 127.0.0.1 holding a port, so that a server asked to bind it cannot. */
export async function holdPort(): Promise<{ port: number; release(): Promise<void> }> {
  const holder = createServer();
  await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
  const address = holder.address();
  if (address === null || typeof address === 'string') throw new Error('no port bound');
  return {
    port: address.port,
    release: () => new Promise<void>((resolve) => holder.close(() => resolve())),
  };
}

/** What `openssl s_client` negotiated, and everything it printed. */
export interface SClientResult {
  /** The protocol of the session, e.g. `TLSv1.3`; undefined when no session was established. */
  protocol: string | undefined;
  /** The cipher of the session, e.g. `ECDHE-ECDSA-AES128-GCM-SHA256`; undefined without a session. */
  cipher: string | undefined;
  /** Whether a client-initiated renegotiation (`R`) completed a second handshake. */
  renegotiated: boolean;
  output: string;
}

/** TLS 1.2 suites without an AEAD: CBC with HMAC. With `-tls1_2`, a client that offers nothing else. */
export const cbcOnlyCiphers = 'HIGH:!AESGCM:!CHACHA20:!AESCCM:!ARIAGCM';

/** A second handshake after `R`: the chain is verified again. */
const secondHandshake = /^RENEGOTIATING$[\s\S]*^verify return:1$/m;

/**
 * Connects with `openssl s_client` to 127.0.0.1:`port` (verifying against `caFile`), with extra
 * `args` (`-tls1_2`, `-cipher ...`); with `renegotiate`, asks for a renegotiation (`R`) once the
 * handshake is done and reports whether a second handshake happened.
 */
export function sClient(
  port: number,
  caFile: string,
  args: readonly string[],
  renegotiate = false,
): Promise<SClientResult> {
  return new Promise((resolve, reject) => {
    const child = spawn('openssl', ['s_client', '-connect', `127.0.0.1:${port}`, '-CAfile', caFile, ...args]);
    let output = '';
    let asked = false;
    const onData = (chunk: Buffer) => {
      output += chunk.toString('utf8');
      if (!/^SSL handshake has read/m.test(output) || child.stdin.writableEnded) return;
      if (!renegotiate) child.stdin.end('Q\n');
      else if (!asked) {
        asked = true;
        child.stdin.write('R\n');
      } else if (secondHandshake.test(output) || /:error:/.test(output)) child.stdin.end('Q\n');
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    // s_client may exit (a refused handshake or renegotiation) before it reads what is written to it.
    child.stdin.on('error', () => undefined);
    // A server that ignores the renegotiation request leaves s_client waiting: a bound wait, then stop it.
    const stopper = setTimeout(() => child.kill(), 5_000);
    child.once('error', reject);
    child.once('close', () => {
      clearTimeout(stopper);
      // `New, TLSv1.3, Cipher is …` follows every handshake; it names the cipher's protocol version,
      // which the session block (printed with TLS 1.3 only once a ticket arrives) names exactly.
      const summary = /^New, (\S+), Cipher is (\S+)$/m.exec(output);
      const established = summary !== null && summary[2] !== '(NONE)';
      const sessionProtocol = /^ {4}Protocol {2}: (\S+)$/m.exec(output)?.[1];
      resolve({
        protocol: established ? (sessionProtocol ?? summary[1]) : undefined,
        cipher: established ? summary[2] : undefined,
        renegotiated: secondHandshake.test(output),
        output,
      });
    });
  });
}

/**
 * Asserts the product's TLS policy on the server at 127.0.0.1:`port` with `openssl s_client`: TLS 1.3
 * by default; TLS 1.2 only with ECDHE and an AEAD suite; a client offering only CBC suites gets no
 * session; a client-initiated renegotiation, secure or legacy, is refused.
 */
export async function assertTlsPolicy(port: number, caFile: string): Promise<void> {
  const preferred = await sClient(port, caFile, []);
  assert.equal(preferred.protocol, 'TLSv1.3', preferred.output);
  const tls12 = await sClient(port, caFile, ['-tls1_2']);
  assert.equal(tls12.protocol, 'TLSv1.2', tls12.output);
  assert.match(tls12.cipher ?? '', /^ECDHE-(ECDSA|RSA)-(AES(128|256)-GCM-SHA(256|384)|CHACHA20-POLY1305)$/);
  const cbc = await sClient(port, caFile, ['-tls1_2', '-cipher', cbcOnlyCiphers]);
  assert.equal(cbc.cipher, undefined, cbc.output);
  assert.match(cbc.output, /:no shared cipher:|handshake failure/);
  for (const extra of [[], ['-legacy_renegotiation']]) {
    const renegotiation = await sClient(port, caFile, ['-tls1_2', ...extra], true);
    assert.equal(renegotiation.protocol, 'TLSv1.2', renegotiation.output);
    assert.equal(renegotiation.renegotiated, false, renegotiation.output);
    assert.match(renegotiation.output, /:no renegotiation:/);
  }
}
