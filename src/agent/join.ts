/**
 * `kops-controller join`, the node side of bootstrap: generate the keys here (they never leave the
 * node), check that the API server presents a certificate from the trusted CA, ask the bootstrap
 * server for certificates with an identity proof, wait while a human or a policy decides, check what
 * came back (issued-certificates.ts), and write the kubelet's credentials and a kubeconfig that
 * trusts the same CAs only.
 * Dependency faults (network, timeouts, 408, 429, 5xx) are retried with jittered backoff, or after
 * the Retry-After the server named when it is longer, until the deadline; a permanent answer (a
 * denial, an already-registered node, 400, 401, 403, 404) ends the join at once with the server's
 * reasons.
 * On a callback cloud the node also answers kops' callback challenge (challenge-server.ts) while it
 * asks: each attempt carries a fresh one-shot challenge, and the server stops when the join ends.
 */
import type { KeyObject } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { InvalidInputError, NotFoundError, TimeoutError } from '../errors.ts';
import { type Logger, silentLogger } from '../log.ts';
import { buildCsrPem } from '../pki/csr-build.ts';
import { generateKey, privateKeyPem } from '../pki/keys.ts';
import { renderClientKubeconfig } from '../pki/kubeconfig.ts';
import { validateDnsName } from '../pki/profiles.ts';
import { nativeApiVersion } from '../protocol/bootstrap-api.ts';
import { type ChallengeClaim, challengeFieldOf } from '../protocol/challenge.ts';
import { Backoff } from '../runtime/backoff.ts';
import {
  type BootstrapAnswer,
  BootstrapClient,
  type IssuedAnswer,
  type PendingAnswer,
} from './bootstrap-client.ts';
import { type ChallengeListener, startChallengeServer } from './challenge-server.ts';
import { checkIssuedCertificates } from './issued-certificates.ts';
import { ensureDirectory, type NodeFileContent, writeNodeFiles } from './node-files.ts';
import type { ProofProvider } from './proofs.ts';
import { type RetryOptions, retryTransient } from './retry.ts';
import { probeApiServer } from './tls-check.ts';

/** What `join` needs: where to ask, whom to trust, how to prove identity, where to write. */
export interface JoinOptions {
  /**
   * The bootstrap server, e.g. `https://kops-controller.internal.example.com:3988`; a path
   * (`https://lb:3988/kops`) prefixes every call (endpoint-url.ts).
   */
  server: string;
  /**
   * The CAs the node trusts (PEM): the pinned ones discovery returned. The bootstrap server, the API
   * server and the issued certificates must chain to them, and the kubeconfig trusts them and no other.
   */
  caBundlePem: string;
  /**
   * The API server URL from discovery. When absent, the bootstrap server's `apiServer` answer is
   * used. Either way its certificate must chain to `caBundlePem` before anything is written.
   */
  apiServer?: string;
  /** The node name to ask for; the server issues only the name its policy verifies. */
  nodeName: string;
  /** Where the key, certificates and kubeconfig are written. */
  dir: string;
  proof: ProofProvider;
  /**
   * Answer kops' callback challenge (the callback clouds: the server calls the node back on the
   * address its cloud reports before it issues): the cluster's name, which both certificates of the
   * challenge carry, and where to listen (default `0.0.0.0:3987`, kops' port).
   */
  challenge?: { clusterName: string; listen?: string };
  /** Also ask for a kubelet serving certificate (default true). */
  servingCertificate?: boolean;
  /** Receives one short status line whenever the state changes (waiting, retrying). */
  progress?: (line: string) => void;
  /** How long to keep trying and waiting for approval, in ms (default one hour, as the kubelet). */
  timeoutMs?: number;
  /** Retry delays after transient failures, in ms (default 1 s doubling to 30 s, with jitter). */
  retry?: { initialMs: number; maxMs: number };
  /** Long-poll duration of one wait for approval, in seconds (default 30; the server caps it at 60). */
  pollWaitSeconds?: number;
  random?: () => number;
  signal?: AbortSignal;
  logger?: Logger;
}

/** What a successful join wrote. */
export interface JoinResult {
  nodeName: string;
  instanceGroup?: string;
  apiServer: string;
  /** Whether the request was queued for approval before it was issued. */
  waitedForApproval: boolean;
  files: string[];
}

/** A poll answered faster than this did not long-poll; wait before the next one instead of spinning. */
const minimumPollMs = 1000;

function formatReasons(pending: PendingAnswer): string {
  return pending.reasons.length ? `: ${pending.reasons.join('; ')}` : '';
}

/** Joins the cluster: see the module comment. Throws a typed error saying why it could not. */
export async function join(options: JoinOptions): Promise<JoinResult> {
  const logger = options.logger ?? silentLogger;
  const progress = options.progress ?? (() => undefined);
  const nodeName = validateDnsName(options.nodeName, 'node name');
  const subject = { commonName: `system:node:${nodeName}`, organizations: ['system:nodes'] };
  const clientKey = generateKey('ecdsa-p256');
  const serverKey = options.servingCertificate === false ? undefined : generateKey('ecdsa-p256');
  // The serving request names no addresses: the server certifies the ones its policy verified.
  const csrs = {
    kubelet: buildCsrPem(clientKey, { subject }),
    ...(serverKey ? { 'kubelet-server': buildCsrPem(serverKey, { subject }) } : {}),
  };
  const bodyWith = (challenge: ChallengeClaim | undefined) =>
    Buffer.from(
      JSON.stringify({
        apiVersion: nativeApiVersion,
        nodeName,
        certificateSigningRequests: csrs,
        ...(challenge ? { challenge: challengeFieldOf(challenge) } : {}),
      }),
    );
  await ensureDirectory(options.dir);
  const listener = options.challenge
    ? await startChallengeServer({
        clusterName: options.challenge.clusterName,
        clusterCaPem: options.caBundlePem,
        ...(options.challenge.listen ? { listen: options.challenge.listen } : {}),
        logger,
      })
    : undefined;
  try {
    return await requestAndWrite(options, {
      nodeName,
      clientKey,
      serverKey,
      bodyWith,
      listener,
      logger,
      progress,
    });
  } finally {
    await listener?.stop();
  }
}

/** The keys and request parts of one join, made before the first attempt. */
interface JoinRequest {
  nodeName: string;
  clientKey: KeyObject;
  serverKey: KeyObject | undefined;
  /** The request body, with a challenge when the node answers the callback. */
  bodyWith(challenge: ChallengeClaim | undefined): Buffer;
  listener: ChallengeListener | undefined;
  logger: Logger;
  progress: (line: string) => void;
}

async function requestAndWrite(options: JoinOptions, request: JoinRequest): Promise<JoinResult> {
  const { nodeName, clientKey, serverKey, bodyWith, listener, logger, progress } = request;
  const client = new BootstrapClient({ server: options.server, caBundlePem: options.caBundlePem });
  const backoff = new Backoff({
    ...(options.retry ?? { initialMs: 1000, maxMs: 30_000 }),
    jitter: 0.5,
    random: options.random ?? Math.random,
  });
  // Monotonic, as the retries' deadline (agent/retry.ts).
  const started = performance.now();
  const retry = {
    deadline: started + (options.timeoutMs ?? 3_600_000),
    backoff,
    what: 'bootstrap request',
    progress,
    logger,
    ...(options.signal ? { signal: options.signal } : {}),
  };
  // An untrusted certificate is final; an API server that cannot be reached yet (still booting, its
  // DNS name not published yet) is a fault like any other and is waited for until the deadline.
  const checkApiServer = (apiServer: string) =>
    retryTransient(() => probeApiServer(apiServer, options.caBundlePem), {
      ...retry,
      what: 'API server check',
    });
  if (options.apiServer) await checkApiServer(options.apiServer);
  const pollWait = options.pollWaitSeconds ?? 30;
  let pending: PendingAnswer | undefined;
  const attempt = async (): Promise<BootstrapAnswer> => {
    if (pending) {
      try {
        return await client.poll(pending.poll, pollWait, options.signal);
      } catch (err) {
        if (!(err instanceof NotFoundError)) throw err;
        // The handle expired or the server forgot it (restart): ask again with the same keys,
        // which the server's deterministic queue naming maps back to the same request.
        logger.info({ requestId: pending.requestId }, 'pending request unknown to the server; resubmitting');
        pending = undefined;
      }
    }
    // A fresh challenge per attempt: the server may have used up the last one before it failed.
    const body = bodyWith(listener?.createChallenge());
    return client.submit(body, await options.proof(body, options.signal), options.signal);
  };
  let issued: IssuedAnswer;
  let waitedForApproval: boolean;
  try {
    ({ issued, waitedForApproval } = await untilIssued(attempt, retry, started, (answer) => {
      if (!pending) logger.info({ requestId: answer.requestId }, 'bootstrap request queued for approval');
      pending = answer;
    }));
  } finally {
    client.close();
  }
  const apiServer = options.apiServer ?? issued.apiServer;
  if (!apiServer) {
    throw new InvalidInputError(
      'the API server URL is unknown: the bootstrap server did not say and no discovery gave one',
    );
  }
  if (!options.apiServer) await checkApiServer(apiServer);
  return writeCredentials(options, issued, apiServer, nodeName, clientKey, serverKey, waitedForApproval);
}

/**
 * Attempts until the server issues: a queued answer is reported (`onQueued`), shown as progress and
 * polled again, at most until the deadline; a server that answered at once is not polled in a spin.
 */
async function untilIssued(
  attempt: () => Promise<BootstrapAnswer>,
  retry: RetryOptions,
  started: number,
  onQueued: (answer: PendingAnswer) => void,
): Promise<{ issued: IssuedAnswer; waitedForApproval: boolean }> {
  let waitedForApproval = false;
  for (;;) {
    const attemptStarted = performance.now();
    const answer = await retryTransient(attempt, retry);
    if (answer.status === 'issued') return { issued: answer, waitedForApproval };
    onQueued(answer);
    waitedForApproval = true;
    const waited = Math.round((performance.now() - started) / 1000);
    if (performance.now() > retry.deadline) {
      throw new TimeoutError(`gave up after ${waited}s: the request is still waiting for approval`);
    }
    retry.progress?.(`waiting for approval (${waited}s)${formatReasons(answer)}`);
    if (performance.now() - attemptStarted < minimumPollMs) {
      await delay(minimumPollMs, undefined, retry.signal ? { signal: retry.signal } : {});
    }
  }
}

async function writeCredentials(
  options: JoinOptions,
  issued: IssuedAnswer,
  apiServer: string,
  nodeName: string,
  clientKey: KeyObject,
  serverKey: KeyObject | undefined,
  waitedForApproval: boolean,
): Promise<JoinResult> {
  const checked = checkIssuedCertificates(
    issued.certificates,
    { kubelet: clientKey, ...(serverKey ? { 'kubelet-server': serverKey } : {}) },
    nodeName,
    options.caBundlePem,
    new Date(),
    issued.serverClockOffsetMs,
  );
  const clientPem = checked.kubelet as string;
  const serverPem = checked['kubelet-server'];
  // The kubeconfig and ca.crt trust what the node pinned, never a CA an answer names.
  const { dir, caBundlePem } = options;
  const clientKeyPem = privateKeyPem(clientKey);
  const kubeconfig = renderClientKubeconfig({
    server: apiServer,
    caBundlePem,
    certificatePem: clientPem,
    key: { pem: clientKeyPem },
    user: `system:node:${nodeName}`,
  });
  const files: NodeFileContent[] = [
    { file: 'clientKey', data: clientKeyPem, mode: 0o600 },
    { file: 'clientCertificate', data: clientPem, mode: 0o644 },
    ...(serverPem && serverKey
      ? [
          { file: 'serverKey', data: privateKeyPem(serverKey), mode: 0o600 } as const,
          { file: 'serverCertificate', data: serverPem, mode: 0o644 } as const,
        ]
      : []),
    { file: 'caBundle', data: caBundlePem, mode: 0o644 },
    // Last: its presence means every other file is in place. It embeds the key, hence 0600.
    { file: 'kubeconfig', data: kubeconfig, mode: 0o600 },
  ];
  // One set: a crash leaves the previous credentials or these, never a new key beside an old certificate.
  const written = await writeNodeFiles(dir, files);
  return {
    nodeName,
    ...(issued.instanceGroup ? { instanceGroup: issued.instanceGroup } : {}),
    apiServer,
    waitedForApproval,
    files: written,
  };
}
