/**
 * Runs the simulated API server as its own process:
 * `node src/sim/apiserver/main.ts --state-dir DIR [--port N]`. Prints `export KUBECONFIG=DIR/kubeconfig`
 * on standard output and serves until SIGINT or SIGTERM.
 */
import { parseArgs } from 'node:util';
import { ConfigError, describeError, exitCodeOf } from '../../errors.ts';
import { createLogger } from '../../log.ts';
import { startDevApiServer } from './dev.ts';

/** Parses the command line of the standalone simulator. */
export function parseMainArgs(argv: string[]): { stateDir: string; port: number; host: string } {
  let values: { 'state-dir'?: string; port?: string; host?: string };
  try {
    ({ values } = parseArgs({
      args: argv,
      options: { 'state-dir': { type: 'string' }, port: { type: 'string' }, host: { type: 'string' } },
      strict: true,
    }));
  } catch (err) {
    throw new ConfigError(
      `${(err as Error).message}; usage: main.ts --state-dir DIR [--port N] [--host ADDR]`,
    );
  }
  const stateDir = values['state-dir'];
  if (!stateDir) throw new ConfigError('--state-dir is required: the directory that receives the kubeconfig');
  const port = Number(values.port ?? '0');
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new ConfigError(`--port ${values.port}: expected a port number between 0 and 65535`);
  }
  return { stateDir, port, host: values.host ?? '127.0.0.1' };
}

if (import.meta.main) {
  try {
    const args = parseMainArgs(process.argv.slice(2));
    const dev = await startDevApiServer({ ...args, logger: createLogger() });
    process.stdout.write(`${dev.exportLine}\n`);
    const stop = () => void dev.close().then(() => process.exit(0));
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  } catch (err) {
    process.stderr.write(`apiserver: ${describeError(err)}\n`);
    process.exitCode = exitCodeOf(err);
  }
}
