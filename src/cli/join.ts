/**
 * `kops-controller join`: run on a new node. Discovers the cluster from the bootstrap endpoint
 * (trusting it through a CA pin or file), proves the node's identity the way its cloud allows, and
 * writes the kubelet's key, certificates and kubeconfig into `--dir`. See docs/join.md.
 */
import { existsSync } from 'node:fs';
import { hostname } from 'node:os';
import { Command, Option } from 'commander';
import { type DiscoveryOptions, discoverCluster } from '../agent/discovery.ts';
import { type JoinOptions, type JoinResult, join } from '../agent/join.ts';
import { nodeFilePath } from '../agent/node-files.ts';
import {
  bootstrapTokenFlag,
  gceIdentityProof,
  noProof,
  type ProofProvider,
  tokenProof,
  validateBootstrapToken,
} from '../agent/proofs.ts';
import { type CurrentCredentials, readCurrentCredentials, renewalProof } from '../agent/renewal.ts';
import { type RetryOptions, retryTransient } from '../agent/retry.ts';
import { supportedClouds } from '../config/schema.ts';
import { ConfigError, InvalidInputError } from '../errors.ts';
import type { Logger } from '../log.ts';
import { parsePin } from '../pki/pin.ts';
import { callbackClouds } from '../protocol/challenge.ts';
import { Backoff } from '../runtime/backoff.ts';
import { collect, commandLogger, durationFlag, flagValue } from './common.ts';
import { formatOutput, outputOption, writeOut } from './output.ts';

interface JoinCommandOptions {
  server: string;
  caPin?: string[];
  caFile?: string;
  token?: string;
  cloud?: JoinCloud;
  nodeName?: string;
  dir: string;
  awsRegion?: string;
  awsProofVersion: string;
  gceIdentityUrl?: string;
  metadataUrl?: string;
  machineKey?: string;
  clusterName?: string;
  challengeListen?: string;
  renew?: boolean;
  servingCertificate: boolean;
  timeout: string;
  output: string;
}

/** The clouds `--cloud` proves identity with: every cloud the configuration names. */
const joinClouds = supportedClouds;
type JoinCloud = (typeof joinClouds)[number];

/**
 * The clouds whose proof is the instance id the node reads from its metadata service, by how each
 * makes it from `--metadata-url` (default: the cloud's link-local service). Each cloud's module (some
 * bring their SDK: Linode's alone is ~440 modules) is imported only when the node is on that cloud.
 */
const metadataProofs: Partial<
  Record<JoinCloud, (metadataUrl: string | undefined) => Promise<ProofProvider>>
> = {
  hetzner: async (url) =>
    (await import('../agent/hetzner-proof.ts')).hetznerProof(url ? { metadataUrl: url } : {}),
  digitalocean: async (url) =>
    (await import('../agent/digitalocean-proof.ts')).digitalOceanProof(url ? { metadataUrl: url } : {}),
  linode: async (url) =>
    (await import('../agent/linode-proof.ts')).linodeProof(url ? { metadataUrl: url } : {}),
  openstack: async (url) =>
    (await import('../agent/openstack-proof.ts')).openstackProof(url ? { metadataUrl: url } : {}),
  scaleway: async (url) =>
    (await import('../agent/scaleway-proof.ts')).scalewayProof(url ? { metadataUrl: url } : {}),
  azure: async (url) => (await import('../agent/azure-proof.ts')).azureProof(url ? { imdsUrl: url } : {}),
};

/** The environment variable `join` reads the bootstrap token from when `--token` is not given. */
export const tokenEnvironmentVariable = 'KOPS_CONTROLLER_JOIN_TOKEN';

/** How long discovery is retried (kubeadm's default discovery timeout). */
const discoveryTimeoutMs = 5 * 60_000;

/** The proof for `--cloud` (or the token, or none), made fresh for each attempt. */
async function proofFor(
  options: JoinCommandOptions,
  token: string | undefined,
  logger: Logger,
): Promise<ProofProvider> {
  const fromMetadata = options.cloud === undefined ? undefined : metadataProofs[options.cloud];
  if (fromMetadata) return fromMetadata(options.metadataUrl);
  if (options.cloud === 'metal' && options.machineKey) {
    const { pkiTpmProofFromFile } = await import('../agent/pki-tpm-proof.ts');
    return pkiTpmProofFromFile(options.machineKey, { hostname: options.nodeName ?? hostname() });
  }
  switch (options.cloud) {
    case 'aws': {
      const region = options.awsRegion ?? process.env['AWS_REGION'] ?? process.env['AWS_DEFAULT_REGION'];
      if (!region) throw new ConfigError('--cloud aws needs the region: pass --aws-region or set AWS_REGION');
      const version = options.awsProofVersion === '1' ? 1 : 2;
      // The SDK's default chain: on an instance, the instance profile from IMDS. STS itself is never
      // called here; the controller replays the signed request.
      const [{ STSClient }, { awsStsProof }] = await Promise.all([
        import('@aws-sdk/client-sts'),
        import('../agent/aws-proof.ts'),
      ]);
      // A provider of its own for each attempt: the SDK's shares one pending read of IMDS between
      // callers, so a read that hangs would hold every later attempt too (each is bounded, 30 s).
      return awsStsProof(() => new STSClient({ region }).config.credentials(), region, version);
    }
    case 'gce':
      return gceIdentityProof({
        audience: options.server,
        ...(options.gceIdentityUrl ? { identityUrl: options.gceIdentityUrl } : {}),
      });
    default:
      if (token) return tokenProof(token);
      logger.warn(
        'no identity proof: only the queue (a human) or insecure-always-approve can admit this node',
      );
      return noProof;
  }
}

/** A status line on standard error, rewritten in place on a terminal. */
function progressLine(command: Command): { update(line: string): void; end(): void } {
  const write = command.configureOutput().writeErr ?? ((text: string) => process.stderr.write(text));
  const tty = process.stderr.isTTY;
  let shown = false;
  return {
    update(line) {
      write(tty ? `\r\x1b[2K${line}` : `${line}\n`);
      shown = true;
    },
    end() {
      if (tty && shown) write('\n');
    },
  };
}

/** Where the cluster is and how its CA is trusted: the endpoint, the pins or bundle, the token. */
function addTrustOptions(command: Command): Command {
  return command
    .requiredOption(
      '--server <url>',
      'the bootstrap endpoint, e.g. https://kops-controller.internal.example.com:3988',
    )
    .addOption(
      new Option(
        '--ca-pin <sha256:hex>',
        'pin of the cluster CA (`kops-controller pki pin`); repeatable',
      ).argParser((value: string, previous?: string[]) => {
        flagValue('--ca-pin', value, parsePin); // a malformed pin is refused before anything is fetched
        return collect(value, previous);
      }),
    )
    .addOption(new Option('--ca-file <file>', 'trust this PEM CA bundle instead of pinning'))
    .addOption(
      new Option(
        '--token <id.secret>',
        `bootstrap token (kubeadm format); also read from $${tokenEnvironmentVariable}`,
      ).argParser(bootstrapTokenFlag('--token')),
    );
}

/** Who this machine is and how it proves it, and where its credentials go. */
function addIdentityOptions(command: Command): Command {
  return command
    .addOption(
      new Option('--cloud <cloud>', 'prove identity with the cloud (default: token or none)').choices(
        joinClouds,
      ),
    )
    .addOption(
      new Option(
        '--node-name <name>',
        'node name to ask for (default: on aws the instance id from IMDS, else the host name)',
      ),
    )
    .requiredOption('--dir <dir>', 'where to write the key, certificates and kubelet.kubeconfig')
    .addOption(new Option('--aws-region <region>', 'AWS region of the instance (default: $AWS_REGION)'))
    .addOption(
      new Option('--aws-proof-version <n>', 'kops STS proof format').choices(['1', '2']).default('2'),
    )
    .addOption(
      new Option('--gce-identity-url <url>', 'metadata server identity-token URL (default: the GCE one)'),
    )
    .addOption(
      new Option(
        '--metadata-url <url>',
        "the metadata service on hetzner, digitalocean, linode, openstack, scaleway, azure (default: the cloud's link-local one)",
      ),
    )
    .addOption(
      new Option(
        '--machine-key <file>',
        'kops metal: sign x-pki-tpm proofs with this ECDSA key (nodeup: /etc/kubernetes/kops/pki/machine/private.pem), registered with `host add`',
      ),
    )
    .addOption(
      new Option('--cluster-name <name>', "the cluster's name (the callback challenge and --renew need it)"),
    )
    .addOption(
      new Option(
        '--challenge-listen <host:port>',
        'where the callback-challenge server listens on a callback cloud (default [::]:3987, else 0.0.0.0:3987)',
      ),
    )
    .addOption(
      new Option(
        '--renew',
        'renew before expiry: prove identity with the current kubelet-client certificate and key in --dir',
      ).conflicts(['token', 'cloud']),
    )
    .addOption(
      new Option(
        '--no-serving-certificate',
        'do not ask for a kubelet serving certificate (only asked for with --cloud, whose proof verifies addresses)',
      ),
    );
}

/** The `join` command. */
export function joinCommand(): Command {
  const command = new Command('join').description(
    'join this machine to the cluster: discover it, prove identity, write kubelet credentials',
  );
  return addIdentityOptions(addTrustOptions(command))
    .addOption(new Option('--timeout <duration>', 'how long to retry and wait for approval').default('1h'))
    .addOption(outputOption())
    .action(runJoin);
}

/** How a step before the request is retried: until the join's deadline, shown and logged. */
type StepRetry = Omit<RetryOptions, 'what'> & { logger: Logger };

/** How the node's steps wait between faults: 1 s doubling to 30 s, plus up to 50 % at random. */
function joinBackoff(): Backoff {
  return new Backoff({ initialMs: 1000, maxMs: 30_000, jitter: 0.5 });
}

/**
 * Discovery, retried as kubeadm does: a missing signature or an unreachable endpoint is waited for
 * five minutes at most, so a token that cannot sign or an endpoint that is not there does not keep
 * the node for an hour. A permanent answer (a wrong URL's 404, a 403) ends discovery at once.
 */
function discoverWithRetry(
  options: JoinCommandOptions,
  token: string | undefined,
  deadline: number,
  progress: (line: string) => void,
  logger: Logger,
) {
  const discovery: DiscoveryOptions = { url: options.server, logger };
  if (options.caPin?.length) discovery.caPins = options.caPin;
  if (options.caFile) discovery.caFile = options.caFile;
  if (token) discovery.token = token;
  return retryTransient(() => discoverCluster(discovery), {
    deadline: Math.min(deadline, performance.now() + discoveryTimeoutMs),
    backoff: joinBackoff(),
    what: 'discovery',
    progress,
    logger,
  });
}

/** What `join` prints: the result as JSON or YAML, or one table row. */
function printJoinResult(command: Command, options: JoinCommandOptions, result: JoinResult): void {
  writeOut(
    command,
    formatOutput(options.output, result, {
      rows: [result],
      columns: [
        { header: 'node', value: (r) => r.nodeName },
        { header: 'instance group', value: (r) => r.instanceGroup ?? '' },
        { header: 'api server', value: (r) => r.apiServer },
        { header: 'kubeconfig', value: (r) => r.files[r.files.length - 1] },
      ],
    }),
  );
}

/** The cluster name the callback challenge and renewal need: `--cluster-name`, required then. */
function clusterNameFor(options: JoinCommandOptions, why: string): string {
  if (!options.clusterName)
    throw new InvalidInputError(`pass --cluster-name: ${why} names kops-controller.<cluster>`);
  return options.clusterName;
}

/**
 * The name to ask for: `--node-name`, else on AWS the instance id, the name the `aws` policy issues
 * unless it is set to IP-based names (then pass `--node-name`), else the host name.
 */
async function nodeNameFor(options: JoinCommandOptions, retry: StepRetry): Promise<string> {
  if (options.nodeName) return options.nodeName;
  if (options.cloud !== 'aws') return hostname();
  const { awsInstanceId } = await import('../agent/aws-instance.ts');
  // IMDS may not answer yet at boot: waited for like any other fault, within the same --timeout.
  return retryTransient(() => awsInstanceId(), { ...retry, what: 'instance id' });
}

/**
 * Who the node says it is and how it proves it: the name, the proof, whether a serving certificate
 * is asked for, and the callback challenge on the callback clouds.
 */
async function identityOf(
  options: JoinCommandOptions,
  token: string | undefined,
  renewing: CurrentCredentials | undefined,
  retry: StepRetry,
): Promise<Pick<JoinOptions, 'nodeName' | 'proof' | 'servingCertificate' | 'challenge'>> {
  if (renewing) {
    return {
      nodeName: renewing.nodeName,
      proof: renewalProof(renewing, clusterNameFor(options, '--renew')),
      // A renewal renews what the node has: its serving certificate only if it holds one.
      servingCertificate:
        options.servingCertificate && existsSync(nodeFilePath(options.dir, 'serverCertificate')),
    };
  }
  // The proof first: it checks what the flags and environment lack (`--cloud aws` without a region)
  // before the name may wait on the metadata service.
  const proof = await proofFor(options, token, retry.logger);
  const identity: Pick<JoinOptions, 'nodeName' | 'proof' | 'servingCertificate' | 'challenge'> = {
    nodeName: await nodeNameFor(options, retry),
    proof,
    // Only a cloud or inventory proof verifies addresses; with a token, a human's approval or a
    // metal Host (which records no addresses) the kubelet gets its serving certificate later, from
    // the in-cluster CSR approver.
    servingCertificate: options.servingCertificate && options.cloud !== undefined && !options.machineKey,
  };
  if (options.cloud !== undefined && callbackClouds.has(options.cloud)) {
    identity.challenge = { clusterName: clusterNameFor(options, 'the callback challenge') };
    if (options.challengeListen) identity.challenge.listen = options.challengeListen;
  }
  return identity;
}

/** Runs `join`: discovery, then the certificate request, within one `--timeout`. */
async function runJoin(options: JoinCommandOptions, command: Command): Promise<void> {
  const logger = commandLogger(command);
  if (!options.caPin?.length && !options.caFile) {
    throw new InvalidInputError(
      'pass --ca-pin sha256:... or --ca-file FILE: join never trusts an unknown CA',
    );
  }
  // `--token` was checked as it was parsed; the variable is checked here, each named in the line.
  const fromEnvironment = process.env[tokenEnvironmentVariable];
  const token =
    options.token ??
    (fromEnvironment ? validateBootstrapToken(fromEnvironment, `$${tokenEnvironmentVariable}`) : undefined);
  // Monotonic (agent/retry.ts): chrony's first step of the clock at boot must not move it.
  const deadline = performance.now() + durationFlag('--timeout', options.timeout);
  const progress = progressLine(command);
  try {
    const renewing = options.renew ? await readCurrentCredentials(options.dir) : undefined;
    const retry = { deadline, backoff: joinBackoff(), progress: progress.update, logger };
    const identity = await identityOf(options, token, renewing, retry);
    const cluster = await discoverWithRetry(options, token, deadline, progress.update, logger);
    const result = await join({
      server: options.server,
      caBundlePem: cluster.caBundlePem,
      apiServer: cluster.server,
      dir: options.dir,
      ...identity,
      progress: progress.update,
      timeoutMs: Math.max(0, deadline - performance.now()),
      logger,
    });
    progress.end();
    printJoinResult(command, options, result);
  } catch (err) {
    progress.end();
    throw err;
  }
}
