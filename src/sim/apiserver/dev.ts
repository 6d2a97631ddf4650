/**
 * The simulated API server as a long-running local cluster: starts it and writes an admin
 * kubeconfig (and the CA) into a state directory, so kubectl and the controller can point at it.
 */
import { chmod, mkdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { ConfigError } from '../../errors.ts';
import { type Logger, silentLogger } from '../../log.ts';
import { type SimApiServer, startApiServer } from './index.ts';

/** Where and how to run the development API server. */
export interface DevApiServerOptions {
  /** Directory that receives `kubeconfig` and `ca.crt` (created if missing). */
  stateDir: string;
  /** Port to listen on (default 0: ephemeral). */
  port?: number;
  host?: string;
  logger?: Logger;
}

/** A running development API server and where its kubeconfig is. */
export interface DevApiServer {
  server: SimApiServer;
  kubeconfigPath: string;
  /** The line to paste into a shell: `export KUBECONFIG=...`. */
  exportLine: string;
  close(): Promise<void>;
}

/** Starts the simulator for local use and writes `<stateDir>/kubeconfig` (admin, mode 0600). */
export async function startDevApiServer(options: DevApiServerOptions): Promise<DevApiServer> {
  const logger = options.logger ?? silentLogger;
  const stateDir = resolve(options.stateDir);
  try {
    await mkdir(stateDir, { recursive: true, mode: 0o700 });
  } catch (err) {
    throw new ConfigError(
      `cannot create state directory ${stateDir}: ${(err as Error).message}; pass a writable --state-dir`,
      {
        cause: err,
      },
    );
  }
  const server = await startApiServer({
    ...(options.port !== undefined ? { port: options.port } : {}),
    ...(options.host !== undefined ? { host: options.host } : {}),
    logger,
  });
  const kubeconfigPath = join(stateDir, 'kubeconfig');
  try {
    // The kubeconfig holds an admin bearer token: owner-only, like ~/.kube/config.
    await writeFile(kubeconfigPath, server.kubeconfig(), { mode: 0o600 });
    await chmod(kubeconfigPath, 0o600);
    await writeFile(join(stateDir, 'ca.crt'), server.caCertificate);
  } catch (err) {
    await server.close();
    throw new ConfigError(
      `cannot write ${kubeconfigPath}: ${(err as Error).message}; pass a writable --state-dir`,
      { cause: err },
    );
  }
  logger.info({ url: server.url, kubeconfig: kubeconfigPath }, 'development API server ready');
  return {
    server,
    kubeconfigPath,
    exportLine: `export KUBECONFIG=${kubeconfigPath}`,
    close: () => server.close(),
  };
}
