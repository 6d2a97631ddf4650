/**
 * The floor under the bootstrap server's CPU per certificate: a bare `node:https` server with the
 * product's TLS settings (src/net/hardened-server.ts's policy, deploy/openssl.cnf, an ECDSA P-256
 * serving certificate from the cluster CA, as the bootstrap server makes its own) that reads each
 * request's body and answers it with a fixed body (one real answer of ours, byte for byte). What it
 * costs per request is what Node's TLS and HTTP cost; the bootstrap server's plain issuance minus
 * this is what the product's own code costs (bench/issuance-cost.ts measures both in one run).
 *
 * With `hardened`, the same answer comes from the product's own server (src/net/hardened-server.ts:
 * the connection caps and their bookkeeping, TLS started on the first bytes, the timeouts, the
 * connection gauges) instead of a bare one: the difference between the two floors is what that
 * server costs per connection and request, and plain issuance minus it is the bootstrap handler's.
 * The server runs in a process of its own, forked from this file, so that its CPU is its own.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { Registry } from 'prom-client';
import { defaultConnectionLimits, startHardenedServer, tlsServerPolicy } from '../src/net/hardened-server.ts';
import { cpuSecondsOf, exited, forkWithImageOpenssl } from './join-storm/server-process.ts';
import type { Reply, ServerProcess } from './join-storm/types.ts';

/** What the floor server serves: its key and certificate chain (PEM), and the body of every answer. */
export interface FloorSpec {
  tls: { key: string; cert: string };
  body: string;
  /** Serve from src/net/hardened-server.ts instead of a bare `node:https` server. */
  hardened?: boolean;
}

type ToFloor = { type: 'start'; spec: FloorSpec } | { type: 'exit' };
type FromFloor = { type: 'ready'; url: string };

/** The floor server process: Node's HTTPS server, the body read, one fixed answer. */
function serveFloor(): void {
  process.on('disconnect', () => process.exit(0));
  process.on('message', (message: ToFloor) => {
    if (message.type === 'exit') process.exit(0);
    const { tls, body } = message.spec;
    const headers = {
      'content-type': 'application/json',
      'cache-control': 'no-store',
      'content-length': Buffer.byteLength(body),
    };
    const handler = (req: IncomingMessage, res: ServerResponse) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(200, headers);
        res.end(body);
      });
    };
    const ready = (url: string) => process.send?.({ type: 'ready', url } satisfies FromFloor);
    if (message.spec.hardened) {
      // As the storm's bootstrap server runs it (bench/join-storm/server-process.ts): every node
      // connects from 127.0.0.1, so one source may hold every connection.
      void startHardenedServer({
        name: 'floor',
        listen: '127.0.0.1:0',
        listenSetting: 'floor',
        tls,
        limits: { maxConnectionsPerSource: defaultConnectionLimits.maxConnections },
        maxHeaderSize: 16 * 1024,
        handler,
        registry: new Registry(),
      }).then((server) => ready(server.url));
      return;
    }
    const server = createServer({ ...tlsServerPolicy, ...tls }, handler);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      ready(`https://127.0.0.1:${port}`);
    });
  });
}

/** Forks the floor server and resolves once it listens. */
export async function startFloorServer(spec: FloorSpec): Promise<ServerProcess> {
  const child = forkWithImageOpenssl(import.meta.url);
  const reply = await new Promise<FromFloor>((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`the floor server exited with ${code}`)));
    child.once('message', resolve);
    child.send({ type: 'start', spec } satisfies ToFloor);
  });
  return {
    url: reply.url,
    cpuSeconds: () => cpuSecondsOf(child.pid as number),
    stop: async () => {
      child.send({ type: 'exit' } satisfies ToFloor);
      await exited(child);
    },
  };
}

/** Counts the floor's answers that are the fixed body: its "verified" requests. */
export function floorAnswers(body: string) {
  return (replies: readonly Reply[]): { verified: number; firstFailure?: string } => {
    const bad = replies.find((r) => r.status !== 200 || r.text !== body);
    const verified = replies.filter((r) => r.status === 200 && r.text === body).length;
    return bad === undefined
      ? { verified }
      : { verified, firstFailure: `HTTP ${bad.status}: ${bad.text.slice(0, 300)}` };
  };
}

if (import.meta.main) serveFloor();
