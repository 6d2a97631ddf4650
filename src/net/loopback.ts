/** Starting and stopping the simulators' HTTP servers on loopback, the only address they may use. */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/** A server listening on 127.0.0.1: its base URL and a close that also ends kept-alive connections. */
export interface LoopbackListener {
  url: string;
  close(): Promise<void>;
}

/** Listens on 127.0.0.1 (port 0 = any free port); rejects if the port is taken. */
export async function listenOnLoopback(server: Server, port = 0): Promise<LoopbackListener> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
