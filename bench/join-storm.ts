/**
 * Benchmark: N simulated nodes (default 5,000) join at once: every request is fired together, with a
 * bounded number in flight (default 256), over HTTPS to the real bootstrap server in its own process.
 * - The real `aws` policy (STS replay, replay guard in the API server, EC2 identity) with the AWS
 *   simulator's EC2 throttle on, each node over a new TLS connection of its own: once with this
 *   project's batched EC2 lookups, once with one DescribeInstances per node (kops' design;
 *   bench/identify.ts's lookup). Prints wall time, cloud calls, certificates per second, the ratios.
 * - The plain issuance rate under `insecure-always-approve`, over keep-alive connections and with a
 *   new TLS connection per node, beside `cfssl serve` (Debian golang-cfssl) signing the same CSRs
 *   with the same CA over TLS in the same run, and the ratio (target ≥ 1.0). Those clients offer
 *   only classical key exchange: Debian's cfssl is built with Go 1.19, which has no ML-KEM, while
 *   this server (OpenSSL 3.5) prefers the hybrid X25519MLKEM768 whenever the client offers it. The
 *   same key exchange on both sides compares the servers; one more storm measures this server with
 *   the hybrid a current client negotiates. The group each storm negotiated is printed.
 * Node keys (ECDSA P-256), CSRs and STS proofs are made before the clock starts; every certificate
 * is verified against the CA afterwards. The clients and the simulators share this process, the
 * server (and cfssl) has its own, and the CPU time of each is printed, so a slow simulator or client
 * shows instead of hiding the server's cost; so is how busy our server's event loop was. The server
 * runs with deploy/openssl.cnf, as the image does.
 *
 *   node bench/join-storm.ts [--nodes N] [--concurrency C] [--rounds R (default 3)] [--plain-only]
 */
import { type ChildProcess, execFileSync, fork, spawn } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { Agent, request } from 'node:https';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TLSSocket } from 'node:tls';
import { parseArgs } from 'node:util';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import { signAwsStsProof } from '../src/agent/aws-proof.ts';
import { type AwsInstanceLookup, awsPolicy } from '../src/bootstrap/policies/aws.ts';
import { awsAccountOf } from '../src/bootstrap/policies/build.ts';
import { insecureAlwaysApprovePolicy } from '../src/bootstrap/policies/insecure-always-approve.ts';
import { ConfigMapReplayGuard } from '../src/bootstrap/replay-guard.ts';
import { type RunningBootstrap, servingCertificate, startBootstrapServer } from '../src/bootstrap/server.ts';
import type { BootstrapPolicy } from '../src/bootstrap/types.ts';
import { createAwsClients } from '../src/cloud/aws/clients.ts';
import { AwsNodeIdentifier } from '../src/cloud/aws/identify.ts';
import type { SigV4Credentials } from '../src/cloud/aws/sigv4.ts';
import { parseConfig } from '../src/config/loader.ts';
import { reuseConnections } from '../src/kube/connection-reuse.ts';
import { bundlePem, type CertificateAuthority, caFromPem, createCa } from '../src/pki/ca.ts';
import { buildCsrPem } from '../src/pki/csr-build.ts';
import { generateKey, parsePrivateKeyPem, privateKeyPem } from '../src/pki/keys.ts';
import { nativeApiVersion } from '../src/protocol/bootstrap-api.ts';
import { type SimApiServer, startApiServer } from '../src/sim/apiserver/index.ts';
import { clusterInstances } from '../src/sim/aws/scenario.ts';
import { type AwsSimulator, startAwsSimulator } from '../src/sim/aws/server.ts';
import { toolPath } from '../src/testing/tools.ts';
import { describeInstancePerNode } from './identify.ts';

const clusterName = 'storm.example.com';

/**
 * A full collection of this process's heap, run before every storm whichever server it measures.
 * This process holds the clients, the simulators and the last storms' answers and certificates; left
 * alone, a major collection of about half a second landed inside whichever storm was running (in
 * three runs, always one of ours), stalled its clients and made that server look slow while its
 * event loop sat idle (docs/performance.md). The servers' own collections are part of their cost
 * and are left alone.
 */
setFlagsFromString('--expose-gc');
const collectGarbage = runInNewContext('gc') as () => void;

/** Milliseconds this process spent paused for garbage collection while `work` ran. */
async function gcPauseDuring<T>(work: () => Promise<T>): Promise<{ result: T; gcMs: number }> {
  let gcMs = 0;
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) gcMs += entry.duration;
  });
  observer.observe({ entryTypes: ['gc'] });
  try {
    const result = await work();
    // Entries are delivered asynchronously: let the last ones arrive before counting.
    await new Promise((resolve) => setImmediate(resolve));
    return { result, gcMs };
  } finally {
    observer.disconnect();
  }
}
const opensslConfig = new URL('../deploy/openssl.cnf', import.meta.url).pathname;
const nodesRole = `nodes.${clusterName}`;
const config = parseConfig({ clusterName, cloud: 'aws', server: {} });

/** How the server process approves: the `aws` policy with either EC2 lookup, or approving everything. */
export type ServerMode = 'aws-batched' | 'aws-per-node' | 'insecure-always-approve';

/** What the server process is started with. */
interface ServerSpec {
  mode: ServerMode;
  kubeconfig: string;
  aws: { endpoint: string; region: string; credentials: SigV4Credentials };
  ca: { cert: string; key: string };
}

type ToServer = { type: 'start'; spec: ServerSpec } | { type: 'loop' } | { type: 'exit' };
type FromServer =
  | { type: 'ready'; url: string }
  | { type: 'failed'; error: string }
  /** The server's event loop so far (`performance.eventLoopUtilization()`), in ms. */
  | { type: 'loop'; idle: number; active: number };

/** One storm's figures. */
export interface StormFigures {
  name: string;
  nodes: number;
  /** Answers carrying a certificate that verifies against the CA and names the node. */
  verified: number;
  /** The first failure, when some node got no good certificate. */
  firstFailure?: string;
  wallMs: number;
  /** CPU seconds of the process serving the storm (our server or cfssl). */
  serverCpuSeconds: number;
  /** CPU seconds of this process (clients and simulators). */
  clientCpuSeconds: number;
  /** Milliseconds this process was paused for garbage collection during the storm. */
  clientGcMs: number;
  /** The share of the storm's wall time our server's event loop was busy (absent for cfssl). */
  serverLoopBusy?: number;
  /** The TLS key exchange groups the storm's connections negotiated (`X25519`, `X25519MLKEM768`). */
  keyExchange: string[];
  /** The plain comparison's connection kind and round (plain storms only). */
  kind?: PlainKind;
  round?: number;
  /** Cloud calls the AWS simulator served during the storm (aws storms only). */
  cloud?: { describeInstances: number; throttled: number; sts: number };
}

/** The figures of a run. */
export interface JoinStormResult {
  nodes: number;
  concurrency: number;
  /** The aws storms; absent when the run skipped them (`--plain-only`). */
  aws?: { batched: StormFigures; perNode: StormFigures };
  plain: StormFigures[];
  /** cfssl's storms, or why cfssl could not run here. */
  cfssl: { version: string; storms: StormFigures[] } | { unavailable: string };
}

/** Options of {@link runJoinStorm}. */
export interface JoinStormOptions {
  nodes: number;
  concurrency?: number;
  /** Skip the aws storms (the per-node one takes minutes): only plain issuance and cfssl. */
  plainOnly?: boolean;
  /** Rounds of the plain comparison (default 1); the report gives the median of each. */
  rounds?: number;
}

/** A node of the storm: its name (an instance id), CSR and request body. */
interface StormNode {
  name: string;
  csrPem: string;
  body: string;
  credentials: SigV4Credentials;
}

/** One request of a storm and how to read the certificate out of its answer. */
interface StormRequest {
  path: string;
  body: string;
  authorization?: string;
}

/** The server process: starts the bootstrap server the spec describes and reports its URL. */
async function serveChild(): Promise<void> {
  let running: { boot: RunningBootstrap; release(): void } | undefined;
  // A benchmark that dies (Ctrl-C, a failed assertion) must not leave its server behind.
  process.on('disconnect', () => process.exit(0));
  process.on('message', (message: ToServer) => {
    if (message.type === 'exit') {
      const close = running ? running.boot.close().then(() => running?.release()) : Promise.resolve();
      void close.then(() => process.exit(0));
      return;
    }
    if (message.type === 'loop') {
      const { idle, active } = performance.eventLoopUtilization();
      process.send?.({ type: 'loop', idle, active } satisfies FromServer);
      return;
    }
    startServer(message.spec).then(
      (started) => {
        running = started;
        process.send?.({ type: 'ready', url: started.boot.server.url } satisfies FromServer);
      },
      (err: Error) =>
        process.send?.({ type: 'failed', error: err.stack ?? err.message } satisfies FromServer),
    );
  });
}

async function startServer(spec: ServerSpec): Promise<{ boot: RunningBootstrap; release(): void }> {
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromString(spec.kubeconfig);
  reuseConnections(kubeConfig);
  let policies: BootstrapPolicy[] = [insecureAlwaysApprovePolicy()];
  let release = (): void => undefined;
  if (spec.mode !== 'insecure-always-approve') {
    const { endpoint, region, credentials } = spec.aws;
    const clients = await createAwsClients({ region, endpoint, credentials });
    release = () => clients.destroy();
    const instances: AwsInstanceLookup =
      spec.mode === 'aws-batched'
        ? new AwsNodeIdentifier({ ec2: clients.ec2, clusterName })
        : { lookupInstance: (id) => describeInstancePerNode(clients.ec2, id, clusterName) };
    policies = [
      awsPolicy({
        ...(await awsAccountOf(clients.sts)),
        region,
        nodesRoles: [nodesRole],
        instances,
        replayGuard: new ConfigMapReplayGuard({ core: kubeConfig.makeApiClient(CoreV1Api) }),
        stsEndpoint: endpoint,
      }),
    ];
  }
  const boot = await startBootstrapServer(config, {
    kubeConfig,
    policies,
    ca: caFromPem(spec.ca.cert, parsePrivateKeyPem(spec.ca.key)),
    listen: '127.0.0.1:0',
    serverNames: { ipAddresses: ['127.0.0.1'] },
    // Every simulated node connects from 127.0.0.1, so the per-source limit would throttle the storm.
    rateLimit: { burst: 1_000_000, ratePerSecond: 1_000_000 },
    registry: new Registry(),
  });
  // Storms start once the server is ready and its impersonation guard answers from its Node watch,
  // as a server that has run for a minute does (before that, every guard lookup reads the Node).
  while (!boot.queue.hasSynced() || !boot.guardWatch?.isCurrent()) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return { boot, release };
}

/** A running server process (ours or cfssl): its URL and its CPU time so far. */
interface ServerProcess {
  url: string;
  cpuSeconds(): number;
  /** Our server's event loop so far: busy and idle ms (cfssl has none). */
  eventLoop?(): Promise<{ idle: number; active: number }>;
  stop(): Promise<void>;
}

const clockTicks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;

/** User + system CPU seconds a process has used (Linux /proc). */
function cpuSecondsOf(pid: number): number {
  // Fields after the parenthesised command name: state is 3rd, utime the 14th and stime the 15th.
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / clockTicks;
}

function ownCpuSeconds(): number {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1e6;
}

function exited(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    else child.once('exit', () => resolve());
  });
}

async function startServerProcess(spec: ServerSpec): Promise<ServerProcess> {
  const child = fork(new URL(import.meta.url).pathname, ['--serve'], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    // The OpenSSL settings the image and `npm start` run with (no session tickets).
    execArgv: [
      ...process.execArgv.filter((arg) => !arg.startsWith('--openssl-config')),
      `--openssl-config=${opensslConfig}`,
    ],
  });
  const reply = await new Promise<FromServer>((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`the server process exited with ${code}`)));
    child.once('message', resolve);
    child.send({ type: 'start', spec } satisfies ToServer);
  });
  if (reply.type !== 'ready') {
    child.kill();
    throw new Error(
      `the server process could not start: ${reply.type === 'failed' ? reply.error : reply.type}`,
    );
  }
  return {
    url: reply.url,
    cpuSeconds: () => cpuSecondsOf(child.pid as number),
    eventLoop: () =>
      new Promise((resolve, reject) => {
        const answer = (message: FromServer) => {
          if (message.type !== 'loop') return;
          child.off('message', answer).off('exit', gone);
          resolve(message);
        };
        // A server that died must fail the storm, not leave it waiting for an answer.
        const gone = () => {
          child.off('message', answer);
          reject(new Error('the server process exited'));
        };
        if (!child.connected) return gone();
        child.on('message', answer).once('exit', gone);
        child.send({ type: 'loop' } satisfies ToServer);
      }),
    stop: async () => {
      child.send({ type: 'exit' } satisfies ToServer);
      await exited(child);
    },
  };
}

/** An answer: HTTP status and body, or status 0 and the connection error. */
interface Reply {
  status: number;
  text: string;
  /** The key exchange group of the connection that carried it. */
  keyExchange?: string;
}

/**
 * The key exchange groups the cfssl comparison's clients offer: classical only, as Go 1.19 (Debian's
 * cfssl) supports, so that both servers do the same handshake. Without it, this server would
 * negotiate X25519MLKEM768 and cfssl X25519.
 */
export const classicalGroups = 'X25519:prime256v1:secp384r1';

/** How the clients connect: the CA they trust and the key exchange groups they offer (default OpenSSL's). */
interface ClientTls {
  caPem: string;
  groups?: string;
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
function post(url: string, req: StormRequest, tls: ClientTls, agent: Agent | false): Promise<Reply> {
  return new Promise((resolve) => {
    const failed = (err: unknown) => resolve({ status: 0, text: (err as Error).message ?? String(err) });
    const outgoing = request(
      `${url}${req.path}`,
      {
        method: 'POST',
        agent,
        ca: tls.caPem,
        ...(tls.groups ? { ecdhCurve: tls.groups } : {}),
        headers: {
          'content-type': 'application/json',
          ...(req.authorization === undefined ? {} : { authorization: req.authorization }),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', failed);
        try {
          // Read now: by the end of the answer a keep-alive socket may be back in its agent.
          const keyExchange = keyExchangeOf(res.socket as TLSSocket);
          res.on('end', () =>
            resolve({
              status: res.statusCode ?? 0,
              text: Buffer.concat(chunks).toString('utf8'),
              keyExchange,
            }),
          );
        } catch (err) {
          res.destroy();
          failed(err);
        }
      },
    );
    outgoing.on('error', failed);
    outgoing.end(req.body);
  });
}

/** Fires every request, at most `concurrency` in flight; the answers in request order. */
async function fire(
  url: string,
  requests: readonly StormRequest[],
  options: { tls: ClientTls; keepAlive: boolean; concurrency: number },
): Promise<{ replies: Reply[]; wallMs: number }> {
  // Without keep-alive every request gets an agent of its own: a new TCP connection and a full TLS
  // handshake, as a fleet of separate machines would cost.
  const agent = options.keepAlive ? new Agent({ keepAlive: true, maxSockets: options.concurrency }) : false;
  const replies: Reply[] = new Array(requests.length);
  let next = 0;
  const worker = async () => {
    while (next < requests.length) {
      const i = next++;
      replies[i] = await post(url, requests[i] as StormRequest, options.tls, agent);
    }
  };
  const started = performance.now();
  await Promise.all(Array.from({ length: Math.min(options.concurrency, requests.length) }, worker));
  const wallMs = performance.now() - started;
  if (agent) agent.destroy();
  return { replies, wallMs };
}

/** Reads the certificate out of an answer; throws with the answer when there is none. */
type CertificateOf = (reply: Reply) => string;

const bootstrapCertificate: CertificateOf = (reply) => {
  const pem = (JSON.parse(reply.text) as { certificates?: { kubelet?: string } }).certificates?.kubelet;
  if (reply.status !== 200 || !pem) throw new Error(`HTTP ${reply.status}: ${reply.text.slice(0, 300)}`);
  return pem;
};

const cfsslCertificate: CertificateOf = (reply) => {
  const pem = (JSON.parse(reply.text) as { result?: { certificate?: string } }).result?.certificate;
  if (reply.status !== 200 || !pem) throw new Error(`HTTP ${reply.status}: ${reply.text.slice(0, 300)}`);
  return pem;
};

/** Counts the answers whose certificate the CA signed for the node's name. */
function verifyReplies(
  replies: readonly Reply[],
  nodes: readonly StormNode[],
  certificateOf: CertificateOf,
  caCertificate: X509Certificate,
): { verified: number; firstFailure?: string } {
  let verified = 0;
  let firstFailure: string | undefined;
  replies.forEach((reply, i) => {
    const name = (nodes[i] as StormNode).name;
    try {
      if (reply.status === 0) throw new Error(`no answer: ${reply.text}`);
      const certificate = new X509Certificate(certificateOf(reply));
      if (!certificate.checkIssued(caCertificate) || !certificate.verify(caCertificate.publicKey)) {
        throw new Error('the certificate does not verify against the CA');
      }
      if (!certificate.subject.split('\n').includes(`CN=system:node:${name}`)) {
        throw new Error(`the certificate names ${certificate.subject}, not system:node:${name}`);
      }
      verified++;
    } catch (err) {
      firstFailure ??= `${name}: ${(err as Error).message}`;
    }
  });
  return firstFailure === undefined ? { verified } : { verified, firstFailure };
}

/** One storm against a running server: fired, timed, its CPU measured, its certificates verified. */
async function measureStorm(
  name: string,
  server: ServerProcess,
  requests: readonly StormRequest[],
  check: { nodes: readonly StormNode[]; certificateOf: CertificateOf; caPem: string },
  options: { keepAlive: boolean; concurrency: number; groups?: string },
): Promise<StormFigures> {
  collectGarbage();
  const loopBefore = await server.eventLoop?.();
  const serverCpu = server.cpuSeconds();
  const clientCpu = ownCpuSeconds();
  const { groups, ...rest } = options;
  const tls = { caPem: check.caPem, ...(groups ? { groups } : {}) };
  const {
    result: { replies, wallMs },
    gcMs,
  } = await gcPauseDuring(() => fire(server.url, requests, { tls, ...rest }));
  const serverCpuSeconds = server.cpuSeconds() - serverCpu;
  const clientCpuSeconds = ownCpuSeconds() - clientCpu;
  const loopAfter = await server.eventLoop?.();
  const loopBusy =
    loopBefore && loopAfter
      ? (loopAfter.active - loopBefore.active) /
        (loopAfter.active - loopBefore.active + loopAfter.idle - loopBefore.idle)
      : undefined;
  const ca = new X509Certificate(check.caPem);
  return {
    name,
    nodes: requests.length,
    ...verifyReplies(replies, check.nodes, check.certificateOf, ca),
    wallMs,
    serverCpuSeconds,
    clientCpuSeconds,
    clientGcMs: gcMs,
    ...(loopBusy === undefined ? {} : { serverLoopBusy: loopBusy }),
    keyExchange: [...new Set(replies.map((r) => r.keyExchange).filter((k) => k !== undefined))].sort(),
  };
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });
}

/** The version line of the cfssl binary, or why it cannot run here. */
function cfsslBinary(): { path: string; version: string } | { unavailable: string } {
  try {
    const path = toolPath('cfssl');
    const out = execFileSync(path, ['version'], { encoding: 'utf8', timeout: 10_000 });
    return { path, version: /Version:\s*(\S+)/.exec(out)?.[1] ?? out.split('\n')[0] ?? 'unknown' };
  } catch (err) {
    return { unavailable: `cfssl (Debian golang-cfssl) cannot run here: ${(err as Error).message}` };
  }
}

/**
 * `cfssl serve` with the same CA over TLS (a serving certificate from the same CA), signing client
 * certificates with a default profile; resolves once it answers a signing request.
 */
async function startCfssl(
  binary: string,
  dir: string,
  pems: { caCert: string; caKey: string; tlsCert: string; tlsKey: string },
  probe: StormRequest,
): Promise<ServerProcess> {
  const file = async (name: string, text: string) => {
    const path = join(dir, name);
    await writeFile(path, text, { mode: 0o600 });
    return path;
  };
  const signing = { default: { expiry: '8760h', usages: ['digital signature', 'client auth'] } };
  const port = await freePort();
  const args = [
    'serve',
    '-address=127.0.0.1',
    `-port=${port}`,
    `-ca=${await file('ca.pem', pems.caCert)}`,
    `-ca-key=${await file('ca-key.pem', pems.caKey)}`,
    `-config=${await file('cfssl.json', JSON.stringify({ signing }))}`,
    `-tls-cert=${await file('tls.pem', pems.tlsCert)}`,
    `-tls-key=${await file('tls-key.pem', pems.tlsKey)}`,
    '-loglevel=5',
  ];
  const child = spawn(binary, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString('utf8')).slice(-2000);
  });
  const url = `https://127.0.0.1:${port}`;
  const stop = async () => {
    child.kill();
    await exited(child);
  };
  const deadline = Date.now() + 15_000;
  for (;;) {
    const reply = await post(url, probe, { caPem: pems.caCert }, false);
    if (reply.status === 200) break;
    if (child.exitCode !== null || Date.now() > deadline) {
      await stop();
      throw new Error(
        `cfssl serve did not sign (${reply.status} ${reply.text.slice(0, 200)}); its log: ${stderr.trim()}`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return { url, cpuSeconds: () => cpuSecondsOf(child.pid as number), stop };
}

function kubeletCsr(name: string): string {
  return buildCsrPem(generateKey('ecdsa-p256'), {
    subject: { commonName: `system:node:${name}`, organizations: ['system:nodes'] },
  });
}

function bootstrapBody(csrPem: string): string {
  return JSON.stringify({ apiVersion: nativeApiVersion, certificateSigningRequests: { kubelet: csrPem } });
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
async function warmUp(
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

/** A server of the plain comparison, warmed up, with the storm requests it answers. */
interface PlainSigner {
  name: string;
  server: ServerProcess;
  requests: StormRequest[];
  check: { nodes: readonly StormNode[]; certificateOf: CertificateOf; caPem: string };
}

/** `cfssl serve` with the same CA, warmed up, for the same CSRs; or why cfssl could not run here. */
async function startCfsslSigner(
  ca: CertificateAuthority,
  nodes: readonly StormNode[],
  dir: string,
  concurrency: number,
): Promise<{ version: string; signer: PlainSigner } | { unavailable: string }> {
  const binary = cfsslBinary();
  if ('unavailable' in binary) return binary;
  const caPem = bundlePem(ca);
  const signRequest = (csrPem: string) => ({
    path: '/api/v1/cfssl/sign',
    body: JSON.stringify({ certificate_request: csrPem }),
  });
  const probe = signRequest(kubeletCsr('warm-up'));
  const tls = servingCertificate(ca, { name: 'cfssl', ipAddresses: ['127.0.0.1'] });
  let server: ServerProcess;
  try {
    server = await startCfssl(
      binary.path,
      dir,
      { caCert: caPem, caKey: privateKeyPem(ca.signer.key), tlsCert: tls.cert, tlsKey: tls.key },
      probe,
    );
  } catch (err) {
    return { unavailable: (err as Error).message };
  }
  await warmUp(server.url, probe, caPem, { nodes: nodes.length, concurrency }).catch(async (err: unknown) => {
    await server.stop();
    throw err;
  });
  const requests = nodes.map((node) => signRequest(node.csrPem));
  return {
    version: binary.version,
    signer: {
      name: `cfssl ${binary.version}`,
      server,
      requests,
      check: { nodes, certificateOf: cfsslCertificate, caPem },
    },
  };
}

/** The connection kinds of the plain comparison. */
const plainKinds = {
  'keep-alive': { label: 'keep-alive', keepAlive: true, groups: classicalGroups },
  'new-tls': { label: 'new TLS connection per node', keepAlive: false, groups: classicalGroups },
  // The handshake a current client gets by default: post-quantum hybrid key exchange.
  hybrid: { label: 'new TLS per node, hybrid kx', keepAlive: false, groups: undefined },
} as const;

export type PlainKind = keyof typeof plainKinds;

/**
 * Runs the plain storms in rounds, each round both servers back to back for each kind of
 * connection, so a change in the machine's load during the run hits both sides of a pair.
 */
async function plainRounds(
  ours: PlainSigner,
  cfssl: PlainSigner | undefined,
  rounds: number,
  concurrency: number,
): Promise<{ ours: StormFigures[]; cfssl: StormFigures[] }> {
  const figures = { ours: [] as StormFigures[], cfssl: [] as StormFigures[] };
  const storm = async (signer: PlainSigner, kind: PlainKind, round: number) => {
    const { label, keepAlive, groups } = plainKinds[kind];
    const figure = await measureStorm(
      `${signer.name}, ${label}`,
      signer.server,
      signer.requests,
      signer.check,
      {
        keepAlive,
        concurrency,
        ...(groups ? { groups } : {}),
      },
    );
    return { ...figure, kind, round };
  };
  for (let round = 1; round <= rounds; round++) {
    for (const kind of ['keep-alive', 'new-tls'] as const) {
      // Odd rounds start with ours, even ones with cfssl, so neither side always runs first.
      const runOurs = async () => figures.ours.push(await storm(ours, kind, round));
      const runTheirs = async () => cfssl && figures.cfssl.push(await storm(cfssl, kind, round));
      if (round % 2) await runOurs().then(runTheirs);
      else await runTheirs().then(runOurs);
    }
    figures.ours.push(await storm(ours, 'hybrid', round));
  }
  return figures;
}

/** Runs every storm of the benchmark against simulators, server processes and cfssl started here. */
export async function runJoinStorm(options: JoinStormOptions): Promise<JoinStormResult> {
  const concurrency = options.concurrency ?? 256;
  const aws: AwsSimulator = await startAwsSimulator({ throttling: true });
  // Bookmarks every second instead of every minute, so the guard's watch is current soon after start.
  const api: SimApiServer = await startApiServer({ bookmarkIntervalMs: 1000 });
  const dir = await mkdtemp(join(tmpdir(), 'join-storm-'));
  try {
    const ca = createCa();
    const caPem = bundlePem(ca);
    const instances = clusterInstances({
      cluster: clusterName,
      instanceGroup: 'nodes',
      count: options.nodes,
    });
    aws.ec2.addInstances(instances);
    const nodes: StormNode[] = instances.map(({ id }) => {
      const csrPem = kubeletCsr(id);
      return {
        name: id,
        csrPem,
        body: bootstrapBody(csrPem),
        credentials: aws.sts.addInstanceProfileSession(nodesRole, id),
      };
    });
    const spec = (mode: ServerMode): ServerSpec => ({
      mode,
      kubeconfig: api.kubeconfig(),
      aws: { endpoint: aws.endpoint, region: aws.region, credentials: aws.credentials },
      ca: { cert: caPem, key: privateKeyPem(ca.signer.key) },
    });
    const bootstrapCheck = { nodes, certificateOf: bootstrapCertificate, caPem };

    const awsStorm = async (mode: ServerMode, name: string): Promise<StormFigures> => {
      const server = await startServerProcess(spec(mode));
      try {
        // Signed now, not at generation time: each proof is fresh and spent once.
        const requests = nodes.map((node) => ({
          path: '/v1/certificates',
          body: node.body,
          authorization: signAwsStsProof(node.body, node.credentials, aws.region, 1),
        }));
        aws.calls.reset();
        aws.throttling.bucket.reset();
        const figures = await measureStorm(name, server, requests, bootstrapCheck, {
          keepAlive: false,
          concurrency,
        });
        return {
          ...figures,
          cloud: {
            describeInstances: aws.calls.count('DescribeInstances'),
            throttled: aws.calls.throttled('DescribeInstances'),
            sts: aws.calls.count('GetCallerIdentity'),
          },
        };
      } finally {
        await server.stop();
      }
    };
    const awsStorms = options.plainOnly
      ? undefined
      : {
          batched: await awsStorm('aws-batched', 'aws, batched EC2 lookups'),
          perNode: await awsStorm('aws-per-node', "aws, per-node EC2 (kops')"),
        };

    const plainProbe = { path: '/v1/certificates', body: bootstrapBody(kubeletCsr('warm-up')) };
    const server = await startServerProcess(spec('insecure-always-approve'));
    const started = await startCfsslSigner(ca, nodes, dir, concurrency).catch(async (err: Error) => {
      await server.stop();
      throw err;
    });
    let plain: StormFigures[];
    let cfssl: JoinStormResult['cfssl'];
    try {
      await warmUp(server.url, plainProbe, caPem, { nodes: nodes.length, concurrency });
      const ours: PlainSigner = {
        name: 'ours',
        server,
        requests: nodes.map((node) => ({ path: '/v1/certificates', body: node.body })),
        check: bootstrapCheck,
      };
      const theirs = 'signer' in started ? started.signer : undefined;
      const figures = await plainRounds(ours, theirs, options.rounds ?? 1, concurrency);
      plain = figures.ours;
      cfssl = 'signer' in started ? { version: started.version, storms: figures.cfssl } : started;
    } finally {
      await server.stop();
      if ('signer' in started) await started.signer.server.stop();
    }
    return {
      nodes: options.nodes,
      concurrency,
      ...(awsStorms ? { aws: awsStorms } : {}),
      plain,
      cfssl,
    };
  } finally {
    await api.close();
    await aws.close();
    await rm(dir, { recursive: true, force: true });
  }
}

/** Certificates verified per second of wall time. */
export function certsPerSecond(figures: StormFigures): number {
  return figures.verified / (figures.wallMs / 1000);
}

/** The middle value (the mean of the two middle ones for an even count); NaN for none. */
export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  if (sorted.length === 0) return Number.NaN;
  return sorted.length % 2
    ? (sorted[mid] as number)
    : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}

/** Server CPU milliseconds per verified certificate (less sensitive to the machine's other load than wall time). */
export function serverCpuMsPerCert(figures: StormFigures): number {
  return (figures.serverCpuSeconds * 1000) / Math.max(1, figures.verified);
}

/** The report the benchmark prints. */
export function formatJoinStorm(result: JoinStormResult): string {
  const seconds = (s: number) => `${s.toFixed(1)}s`;
  const row = (f: StormFigures) =>
    `${`${f.name}${f.round && result.plain.some((p) => (p.round ?? 1) > 1) ? ` #${f.round}` : ''}`.padEnd(44)} ${`${f.verified}/${f.nodes}`.padStart(9)} ${`${(f.wallMs / 1000).toFixed(2)}s`.padStart(8)} ` +
    `${certsPerSecond(f).toFixed(0).padStart(7)} ${seconds(f.serverCpuSeconds).padStart(10)} ` +
    `${serverCpuMsPerCert(f).toFixed(2).padStart(8)} ${seconds(f.clientCpuSeconds).padStart(10)} ` +
    `${`${f.clientGcMs.toFixed(0)}ms`.padStart(9)} ` +
    `${(f.serverLoopBusy === undefined ? '-' : `${Math.round(f.serverLoopBusy * 100)}%`).padStart(5)}  ` +
    `${f.keyExchange.join(',')}` +
    (f.cloud
      ? `   DescribeInstances=${f.cloud.describeInstances} throttled=${f.cloud.throttled} STS=${f.cloud.sts}`
      : '') +
    (f.firstFailure ? `\n  first failure: ${f.firstFailure}` : '');
  const header =
    `${'storm'.padEnd(44)} ${'verified'.padStart(9)} ${'wall'.padStart(8)} ${'certs/s'.padStart(7)} ` +
    `${'server CPU'.padStart(10)} ${'ms/cert'.padStart(8)} ${'client CPU'.padStart(10)} ${'client GC'.padStart(9)} ` +
    `${'loop'.padStart(5)}  key exchange`;
  const lines = [
    `join-storm: ${result.nodes} nodes, ${result.concurrency} requests in flight, HTTPS to a server in its own process ` +
      '(ms/cert: server CPU per verified certificate; client CPU: this process, clients and simulators; ' +
      'client GC: its garbage-collection pauses during the storm, after a full collection before each; ' +
      "loop: share of the wall time our server's event loop was busy)",
  ];
  if (result.aws) {
    const { batched, perNode } = result.aws;
    const calls =
      (perNode.cloud?.describeInstances ?? 0) / Math.max(1, batched.cloud?.describeInstances ?? 0);
    lines.push(
      'aws storms: a new TLS connection per node; the aws policy (STS replay, replay guard, EC2) with EC2 throttling on (bucket 100, refill 20/s)',
      header,
      row(batched),
      row(perNode),
      `ratio  ${calls.toFixed(0)}x fewer DescribeInstances, ${(perNode.wallMs / batched.wallMs).toFixed(1)}x less wall time (per-node / batched)`,
    );
  }
  const rounds = Math.max(1, ...result.plain.map((f) => f.round ?? 1));
  lines.push(
    `plain issuance: insecure-always-approve vs cfssl serve over TLS, the same CSRs and CA` +
      (rounds > 1
        ? `, ${rounds} rounds (both servers back to back per kind, alternating who goes first)`
        : ''),
    ...(result.aws ? [] : [header]),
  );
  if ('unavailable' in result.cfssl) {
    lines.push(...result.plain.map(row), `cfssl: not measured — ${result.cfssl.unavailable}`);
    return lines.join('\n');
  }
  const cfssl = result.cfssl.storms;
  lines.push(...[...result.plain, ...cfssl].sort((a, b) => (a.round ?? 0) - (b.round ?? 0)).map(row));
  const ofKind = (storms: StormFigures[], kind: PlainKind) => storms.filter((f) => f.kind === kind);
  // Each round's ratio pairs storms run back to back; the median of those resists a noisy round.
  const pairs = (kind: PlainKind) => {
    const theirs = ofKind(cfssl, kind);
    return ofKind(result.plain, kind).flatMap((ours) => {
      const match = theirs.find((f) => f.round === ours.round);
      return match ? [{ ours, theirs: match }] : [];
    });
  };
  const rate = (kind: PlainKind) =>
    median(pairs(kind).map(({ ours, theirs }) => certsPerSecond(ours) / certsPerSecond(theirs))).toFixed(2);
  const cpu = (kind: PlainKind) =>
    median(
      pairs(kind).map(({ ours, theirs }) => serverCpuMsPerCert(theirs) / serverCpuMsPerCert(ours)),
    ).toFixed(2);
  const ms = (kind: PlainKind) => median(ofKind(result.plain, kind).map(serverCpuMsPerCert));
  const of = rounds > 1 ? `, median of ${rounds} rounds` : '';
  lines.push(
    `ratio  ours/cfssl certs/s: keep-alive ${rate('keep-alive')}, new connection per node ${rate('new-tls')} ` +
      `(target ≥ 1.0${of})`,
    // The machine is shared with the clients, so CPU per certificate compares the servers alone.
    `ratio  cfssl/ours server CPU per certificate: keep-alive ${cpu('keep-alive')}, ` +
      `new connection per node ${cpu('new-tls')} (1.0 = as cheap as cfssl${of})`,
    `hybrid key exchange costs this server ${(ms('hybrid') - ms('new-tls')).toFixed(2)} ms more CPU per new ` +
      `connection; cfssl ${result.cfssl.version} (Go 1.19) cannot negotiate it`,
  );
  return lines.join('\n');
}

if (import.meta.main) {
  const { values } = parseArgs({
    options: {
      nodes: { type: 'string', default: '5000' },
      concurrency: { type: 'string', default: '256' },
      serve: { type: 'boolean', default: false },
      'plain-only': { type: 'boolean', default: false },
      rounds: { type: 'string', default: '3' },
    },
  });
  if (values.serve) await serveChild();
  else {
    const nodes = Number(values.nodes);
    const concurrency = Number(values.concurrency);
    if (!Number.isInteger(nodes) || nodes < 1)
      throw new Error(`--nodes must be a positive integer, got ${values.nodes}`);
    const rounds = Number(values.rounds);
    if (!Number.isInteger(rounds) || rounds < 1)
      throw new Error(`--rounds must be a positive integer, got ${values.rounds}`);
    if (!Number.isInteger(concurrency) || concurrency < 1) {
      throw new Error(`--concurrency must be a positive integer, got ${values.concurrency}`);
    }
    process.stdout.write(
      `${formatJoinStorm(await runJoinStorm({ nodes, concurrency, rounds, plainOnly: values['plain-only'] }))}\n`,
    );
  }
}
