/**
 * `kops-controller discovery publish|serve`: the cluster-info document hosted outside the cluster.
 * `publish` signs the kubeconfig (server URLs + CA bundle) with every signing-capable bootstrap token
 * of the cluster and writes the document to a file or the state store; `serve` answers
 * `GET /cluster-info` with it from anywhere — nodes verify it by CA pin and token signature, so the
 * host serving it needs no secret beyond its own TLS key.
 */
import { readFile } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Command, Option } from 'commander';
import { clusterInfoHandler, signedClusterInfo } from '../bootstrap/discovery.ts';
import { apiTokenSource } from '../bootstrap/tokens.ts';
import { describeError, InvalidInputError, NotFoundError } from '../errors.ts';
import { loadKubeConfig, makeClients } from '../kube/client.ts';
import type { Logger } from '../log.ts';
import { defaultConnectionLimits, startHardenedServer } from '../net/hardened-server.ts';
import { warnIfSessionTicketsOn } from '../net/openssl-config.ts';
import {
  type ClusterInfoDocument,
  clusterInfoPath,
  jwsKeyPrefix,
  parseClusterInfoDocument,
  renderClusterInfoKubeconfig,
} from '../protocol/cluster-info.ts';
import { parseListenAddress } from '../runtime/listen-address.ts';
import { openVfs, vfsOptionsFromEnv } from '../statestore/open.ts';
import type { Vfs } from '../statestore/types.ts';
import {
  collect,
  commandLogger,
  durationFlag,
  flagValue,
  type KubeOptions,
  withConnectionCaps,
  withKubeOptions,
} from './common.ts';
import { formatOutput, outputOption, writeOut } from './output.ts';

interface PublishOptions extends KubeOptions {
  server: string[];
  caFile: string;
  to: string;
  output: string;
}

interface ServeOptions {
  from: string;
  listen: string;
  tlsCert?: string;
  tlsKey?: string;
  plainHttp?: boolean;
  refresh: string;
  maxConnections: number;
  maxConnectionsPerSource: number;
}

/** A document location (`FILE`, `file:///…`, `s3://bucket/key`, `gs://bucket/key`) as a VFS and a name in it. */
function locate(location: string): { vfs: Vfs; name: string } {
  const slash = location.lastIndexOf('/');
  const root = slash < 0 ? '.' : location.slice(0, slash) || '/';
  const name = location.slice(slash + 1);
  if (name === '' || /^[a-z][a-z0-9+.-]*:\/?$/i.test(root)) {
    throw new InvalidInputError(
      `"${location}" does not name a file: use e.g. cluster-info.json or s3://bucket/cluster/cluster-info.json`,
    );
  }
  return { vfs: openVfs(root, vfsOptionsFromEnv(process.env)), name };
}

async function readText(path: string, flag: string): Promise<string> {
  try {
    return await readFile(path, 'utf8');
  } catch (err) {
    throw new NotFoundError(`cannot read ${flag} ${path}: ${(err as Error).message}`, { cause: err });
  }
}

function publishCommand(): Command {
  return withKubeOptions(new Command('publish'))
    .description(
      'write the signed cluster-info document (kubeconfig + a JWS per signing token of the cluster) to a ' +
        'file or the state store; run it again after creating or deleting tokens',
    )
    .requiredOption('--server <url>', 'API server URL nodes should use (repeat for several)', collect)
    .requiredOption('--ca-file <file>', 'PEM bundle of the cluster CA certificate(s)')
    .requiredOption('--to <location>', 'FILE, file:///path, s3://bucket/key or gs://bucket/key')
    .addOption(outputOption())
    .action(async (options: PublishOptions, command: Command) => {
      const kubeconfig = renderClusterInfoKubeconfig({
        servers: options.server,
        caBundlePem: await readText(options.caFile, '--ca-file'),
      });
      const destination = locate(options.to);
      const { kubeConfig } = loadKubeConfig({ kubeconfig: options.kubeconfig, context: options.context });
      const document = await signedClusterInfo(
        kubeconfig,
        apiTokenSource(makeClients(kubeConfig).core),
        new Date(),
      );
      await destination.vfs.write(destination.name, JSON.stringify(document, null, 2) + '\n');
      const signedBy = Object.keys(document.data)
        .filter((k) => k.startsWith(jwsKeyPrefix))
        .map((k) => k.slice(jwsKeyPrefix.length));
      const logger = commandLogger(command);
      if (signedBy.length === 0) {
        logger.warn(
          'no token may sign cluster-info: nodes can discover it with a CA pin, not with a token alone',
        );
      }
      logger.info({ to: options.to, signedBy }, 'published cluster-info');
      const summary = { to: options.to, servers: options.server, signedBy };
      writeOut(
        command,
        options.output === 'table'
          ? `cluster-info written to ${options.to}, signed by ${signedBy.length} token(s)${signedBy.length ? `: ${signedBy.join(', ')}` : ''}\n`
          : formatOutput(options.output, summary),
      );
    });
}

/** Reads the document now and then, keeping the last good one when a read fails. */
function refreshingDocument(
  initial: ClusterInfoDocument,
  load: () => Promise<ClusterInfoDocument>,
  everyMs: number,
  logger: Logger,
): { current: () => ClusterInfoDocument; stop: () => void } {
  let current = initial;
  const refresh = () =>
    load().then(
      (document) => {
        current = document;
      },
      (err: unknown) =>
        logger.warn({ err: describeError(err) }, 'cannot reload cluster-info; serving the last good copy'),
    );
  const timer = setInterval(refresh, everyMs);
  timer.unref();
  return { current: () => current, stop: () => clearInterval(timer) };
}

function serveCommand(): Command {
  const command = new Command('serve')
    .description(
      'serve a published cluster-info document on GET /cluster-info (the bootstrap endpoint off-cluster)',
    )
    .requiredOption('--from <location>', 'FILE, file:///path, s3://bucket/key or gs://bucket/key')
    .option('--listen <addr>', 'address to listen on, e.g. :3988 or 127.0.0.1:0', ':3988')
    .option('--tls-cert <file>', 'serving certificate (PEM), from the cluster CA so nodes verify it')
    .option('--tls-key <file>', 'its private key (PEM)')
    .addOption(new Option('--plain-http', 'serve without TLS, only behind a TLS-terminating load balancer'))
    .option('--refresh <duration>', 'how often to re-read the document', '30s');
  return withConnectionCaps(command, '', 'the server', defaultConnectionLimits).action(
    async (options: ServeOptions, command: Command) => {
      const logger = commandLogger(command);
      if (Boolean(options.tlsCert) !== Boolean(options.tlsKey)) {
        throw new InvalidInputError('give both --tls-cert and --tls-key');
      }
      if (!options.tlsCert && !options.plainHttp) {
        throw new InvalidInputError(
          'nodes fetch cluster-info over HTTPS: give --tls-cert and --tls-key (a certificate from the cluster CA), ' +
            'or --plain-http when a load balancer terminates TLS',
        );
      }
      flagValue('--listen', options.listen, parseListenAddress); // a malformed address fails before the document is read
      const refreshMs = durationFlag('--refresh', options.refresh);
      const source = locate(options.from);
      const load = async () =>
        parseClusterInfoDocument((await source.vfs.read(source.name)).data.toString('utf8'), options.from);
      // Read once before listening: a missing or malformed document fails at start-up, not on the first node.
      const document = refreshingDocument(await load(), load, Math.max(1000, refreshMs), logger);
      const handler = clusterInfoHandler(document.current, logger);
      const route = (req: IncomingMessage, res: ServerResponse) => {
        const path = (req.url ?? '').split('?')[0];
        if (path === clusterInfoPath) return handler(req, res);
        res.writeHead(path === '/healthz' ? 200 : 404, { 'content-type': 'text/plain' });
        res.end(path === '/healthz' ? 'ok\n' : 'not found: the document is at /cluster-info\n');
      };
      const tls = options.tlsCert
        ? {
            cert: await readText(options.tlsCert, '--tls-cert'),
            key: await readText(options.tlsKey as string, '--tls-key'),
          }
        : undefined;
      const server = await startHardenedServer({
        name: 'discovery',
        listen: options.listen,
        listenSetting: '--listen',
        tls,
        limits: {
          maxConnections: options.maxConnections,
          maxConnectionsPerSource: options.maxConnectionsPerSource,
          // A GET of a few KiB: its headers come at once.
          headersTimeout: 5_000,
          requestTimeout: 10_000,
        },
        handler: route,
        logger,
      });
      if (options.plainHttp) logger.warn('serving cluster-info over plain HTTP: put TLS in front of it');
      if (tls) warnIfSessionTicketsOn(logger);
      writeOut(command, `serving cluster-info on ${server.url}${clusterInfoPath}\n`);
      await new Promise<void>((resolve) => {
        const stop = () => resolve();
        process.once('SIGTERM', stop);
        process.once('SIGINT', stop);
      });
      document.stop();
      await server.close();
    },
  );
}

/** The `discovery` command. */
export function discoveryCommand(): Command {
  return new Command('discovery')
    .description('the kubeadm-format cluster-info document, hosted outside the cluster: publish, serve')
    .addCommand(publishCommand())
    .addCommand(serveCommand());
}
