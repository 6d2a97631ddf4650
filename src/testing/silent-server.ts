/**
 * A dependency that accepts connections and never answers a byte, on loopback: what a wedged API
 * server, state store or cloud endpoint (or a load balancer with no healthy backend) looks like to
 * the controller. For the tests that every such wait ends at its deadline and closes its connection.
 */

import { createServer, type Socket } from 'node:net';
import { KubeConfig } from '@kubernetes/client-node';

/** The silent server: its plain-HTTP endpoint, the connections accepted so far and still open. */
export interface SilentServer {
  endpoint: string;
  accepted(): number;
  open(): number;
  close(): void;
}

export async function silentServer(): Promise<SilentServer> {
  const sockets = new Set<Socket>();
  let accepted = 0;
  const server = createServer((socket) => {
    accepted++;
    sockets.add(socket);
    // Read (and drop) what the client sends, so that its closing the connection is seen.
    socket.resume();
    socket.on('error', () => {});
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    endpoint: `http://127.0.0.1:${(server.address() as { port: number }).port}`,
    accepted: () => accepted,
    open: () => sockets.size,
    close() {
      for (const socket of sockets) socket.destroy();
      server.close();
    },
  };
}

/** A silent API server, with a kubeconfig for it. */
export async function silentApiServer(): Promise<SilentServer & { kubeConfig: KubeConfig }> {
  const silent = await silentServer();
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromOptions({
    // Plain HTTP (client-node asks for skipTLSVerify with it): the server never gets to a handshake anyway.
    clusters: [{ name: 'silent', server: silent.endpoint, skipTLSVerify: true }],
    users: [{ name: 'u', token: 't' }],
    contexts: [{ name: 'silent', cluster: 'silent', user: 'u' }],
    currentContext: 'silent',
  });
  return { ...silent, kubeConfig };
}

/** How `work` ended within `ms`: its error, its value, or still pending (a hang). */
export async function outcomeWithin<T>(
  work: Promise<T>,
  ms: number,
): Promise<{ pending: true } | { pending: false; value?: T; error?: unknown }> {
  let timer: NodeJS.Timeout | undefined;
  const pending = new Promise<{ pending: true }>((resolve) => {
    timer = setTimeout(() => resolve({ pending: true }), ms);
  });
  try {
    return await Promise.race([
      work.then(
        (value) => ({ pending: false as const, value }),
        (error: unknown) => ({ pending: false as const, error }),
      ),
      pending,
    ]);
  } finally {
    clearTimeout(timer);
  }
}
