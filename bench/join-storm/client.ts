/** The storm's clients: one HTTPS POST that always settles, a bounded-concurrency storm of them, the warm-up. */
import { Agent, type RequestOptions, request } from 'node:https';
import { type ConnectionOptions, createSecureContext, type SecureContext, type TLSSocket } from 'node:tls';
import type { Reply, StormRequest } from './types.ts';

/**
 * The key exchange groups the cfssl comparison's clients offer: classical only, as Go 1.19 (Debian's
 * cfssl) supports, so that both servers do the same handshake. Without it, this server would
 * negotiate X25519MLKEM768 and cfssl X25519.
 */
export const classicalGroups = 'X25519:prime256v1:secp384r1';

/** How the clients connect: the CA they trust and the key exchange groups they offer (default OpenSSL's). */
export interface ClientTls {
  caPem: string;
  groups?: string;
}

/**
 * The clients' TLS settings, built once per set of settings: every simulated node shares this
 * process's cores with the server, and a context built from the PEM for each connection would be
 * this process's work, not the server's, slowing the storm without measuring anything (a real node
 * builds its own on its own machine).
 */
const contexts = new WeakMap<ClientTls, SecureContext>();
function contextOf(tls: ClientTls): SecureContext {
  let context = contexts.get(tls);
  if (!context) {
    context = createSecureContext({ ca: tls.caPem, ...(tls.groups ? { ecdhCurve: tls.groups } : {}) });
    contexts.set(tls, context);
  }
  return context;
}

function keyExchangeOf(socket: TLSSocket): string {
  const info = socket.getEphemeralKeyInfo?.() as { name?: string } | null | undefined;
  return info?.name ?? 'unknown';
}

/**
 * Sends one request. It always settles, with the answer or with status 0 and what went wrong: a throw
 * inside a response callback would otherwise be an uncaught exception, the storm would never end,
 * and its server processes would keep the test run alive until the runner's timeout.
 */
export function post(url: string, req: StormRequest, tls: ClientTls, agent: Agent | false): Promise<Reply> {
  return new Promise((resolve) => {
    const failed = (err: unknown) => resolve({ status: 0, text: (err as Error).message ?? String(err) });
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (req.authorization !== undefined) headers['authorization'] = req.authorization;
    // Node passes the request's options on to the TLS connection; its types leave this one out.
    const options: RequestOptions & Pick<ConnectionOptions, 'secureContext'> = {
      method: 'POST',
      agent,
      secureContext: contextOf(tls),
      headers,
    };
    const outgoing = request(`${url}${req.path}`, options, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('error', failed);
      try {
        // Read now: by the end of the answer a keep-alive socket may be back in its agent.
        const keyExchange = keyExchangeOf(res.socket as TLSSocket);
        const retryAfter = Number(res.headers['retry-after']);
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            text: Buffer.concat(chunks).toString('utf8'),
            keyExchange,
            ...(Number.isFinite(retryAfter) ? { retryAfterSeconds: retryAfter } : {}),
          }),
        );
      } catch (err) {
        res.destroy();
        failed(err);
      }
    });
    outgoing.on('error', failed);
    outgoing.end(req.body);
  });
}

/** Whether a node would send the request again, as `join` does: the server could not decide it now. */
function isRetryable(reply: Reply): boolean {
  return reply.status === 0 || reply.status === 429 || reply.status === 503;
}

/**
 * Fires every request, at most `concurrency` in flight; the answers in request order. With
 * `attempts` above 1, a request answered 503 or 429 (or not at all) is sent again after the answer's
 * Retry-After (1 s without one), as a joining node does, until it has been sent that many times; its
 * slot waits meanwhile, as the node's connection would be gone. `retries` counts the requests sent again.
 */
export async function fire(
  url: string,
  requests: readonly StormRequest[],
  options: { tls: ClientTls; keepAlive: boolean; concurrency: number; attempts?: number },
): Promise<{ replies: Reply[]; wallMs: number; retries: number }> {
  // Without keep-alive every request gets an agent of its own: a new TCP connection and a full TLS
  // handshake, as a fleet of separate machines would cost.
  const agent = options.keepAlive ? new Agent({ keepAlive: true, maxSockets: options.concurrency }) : false;
  const replies: Reply[] = new Array(requests.length);
  let next = 0;
  let retries = 0;
  const worker = async () => {
    while (next < requests.length) {
      const i = next++;
      let reply = await post(url, requests[i] as StormRequest, options.tls, agent);
      for (let attempt = 1; attempt < (options.attempts ?? 1) && isRetryable(reply); attempt++) {
        retries++;
        await new Promise((resolve) => setTimeout(resolve, 1000 * (reply.retryAfterSeconds ?? 1)));
        reply = await post(url, requests[i] as StormRequest, options.tls, agent);
      }
      replies[i] = reply;
    }
  };
  const started = performance.now();
  await Promise.all(Array.from({ length: Math.min(options.concurrency, requests.length) }, worker));
  const wallMs = performance.now() - started;
  if (agent) agent.destroy();
  return { replies, wallMs, retries };
}

/**
 * Warms a server and this process's clients up before the first measured storm: a keep-alive burst
 * of four storms' worth of requests (at most 20,000), then a storm's worth of new TLS connections
 * (at most 1,000), as many in flight as in the storms, for a node outside the storm. A controller
 * serves for days, so its steady state is what counts. Our server takes 12,000 to 15,000 requests
 * to get there (V8 optimising the request path, its heap settling): after the 2,300 warm-up requests
 * this used to get, its first two rounds cost 20 to 30% more CPU per certificate than later ones
 * (docs/performance.md). cfssl, compiled ahead of time, gets the same warm-up.
 */
export async function warmUp(
  url: string,
  probe: StormRequest,
  caPem: string,
  storm: { nodes: number; concurrency: number },
): Promise<void> {
  const tls = { caPem, groups: classicalGroups };
  const burst = (n: number) => Array.from({ length: n }, () => probe);
  const { nodes, concurrency } = storm;
  await fire(url, burst(Math.min(20_000, 4 * nodes)), { tls, keepAlive: true, concurrency });
  await fire(url, burst(Math.min(1_000, nodes)), { tls, keepAlive: false, concurrency });
}
