/**
 * `kops-controller explain`: dry-runs a bootstrap request — a native or kops nodeup request body
 * (optionally with its `authorization` header value inside) or a bare CSR — against the configured approval
 * policies, evaluating every policy (not only up to the deciding one) and printing each verdict with
 * its reasons. Nothing is issued, queued or recorded in the cluster: proofs are spent only in a
 * private replay guard, so the node can still use a proof that was explained. A request naming the
 * cluster's API server (or a wildcard) is refused first, as the server refuses it before any policy.
 */
import { Command, Option } from 'commander';
import { bootstrapTokenFlag } from '../agent/proofs.ts';
import { evaluateChain } from '../bootstrap/chain.ts';
import { auditDetailOf } from '../bootstrap/context.ts';
import { assertNoReservedNamesIn } from '../bootstrap/issue.ts';
import { kopsApiVersion, kopsProofRequest } from '../bootstrap/kops-handler.ts';
import { type CertificatesInput, parseCertificatesRequest } from '../bootstrap/native-handler.ts';
import { buildPolicies } from '../bootstrap/policies/build.ts';
import { policyDepsFromConfig, policyNamesOf } from '../bootstrap/policies/deps.ts';
import { MemoryReplayGuard } from '../bootstrap/replay-guard.ts';
import { loadReservedNames } from '../bootstrap/reserved-names.ts';
import type { BootstrapRequest, ChainDecision, PolicyDecision } from '../bootstrap/types.ts';
import { loadConfigFile } from '../config/loader.ts';
import type { Config } from '../config/schema.ts';
import { ForbiddenError, InvalidInputError } from '../errors.ts';
import { isJsonObject } from '../json-object.ts';
import { loadKubeConfig, makeClients } from '../kube/client.ts';
import type { Logger } from '../log.ts';
import { nativeApiVersion } from '../protocol/bootstrap-api.ts';
import { openVfs } from '../statestore/open.ts';
import { signingAuthorities } from './bootstrap-parts.ts';
import { commandLogger, type KubeOptions, withKubeOptions } from './common.ts';
import { readInputFile } from './input-file.ts';
import { formatOutput, outputOption, writeOut } from './output.ts';

interface ExplainOptions extends KubeOptions {
  conf: string;
  request?: string;
  csr?: string;
  node?: string;
  token?: string;
  remoteAddress: string;
  output: string;
}

/** Bootstrap bodies are at most 64 KiB (docs/bootstrap-api.md). */
const maxInputBytes = 64 * 1024;

/**
 * The request body and Authorization value an input describes: a request file's own JSON minus its
 * `authorization` field (proofs bound to the body verify only if the node signed this compact JSON),
 * or a native request built around a CSR.
 */
export function explainInput(
  input: { request?: string; csr?: string },
  options: { node?: string; token?: string },
): { body: Buffer; authorization: string | undefined } {
  if (input.request !== undefined) {
    let json: unknown;
    try {
      json = JSON.parse(input.request);
    } catch (err) {
      throw new InvalidInputError(`--request is not JSON: ${(err as Error).message}`);
    }
    if (!isJsonObject(json)) {
      throw new InvalidInputError('--request must be a JSON object (a bootstrap request)');
    }
    const { authorization, ...rest } = json as Record<string, unknown>;
    if (authorization !== undefined && typeof authorization !== 'string') {
      throw new InvalidInputError('the authorization field must be the Authorization header value, a string');
    }
    return {
      body: Buffer.from(JSON.stringify(rest)),
      authorization: options.token ? `Bearer ${options.token}` : authorization,
    };
  }
  const body: Record<string, unknown> = { apiVersion: nativeApiVersion };
  if (options.node !== undefined) body['nodeName'] = options.node;
  body['certificateSigningRequests'] = { kubelet: input.csr };
  return {
    body: Buffer.from(JSON.stringify(body)),
    authorization: options.token ? `Bearer ${options.token}` : undefined,
  };
}

/**
 * The request the server would build: a kops nodeup body (`bootstrap.kops.k8s.io/v1alpha1`) is judged
 * on its proof alone, as `/bootstrap` does before parsing it; anything else is a native request.
 */
export async function requestOf(input: CertificatesInput): Promise<BootstrapRequest> {
  let apiVersion: unknown;
  try {
    apiVersion = (JSON.parse(input.body.toString('utf8')) as { apiVersion?: unknown }).apiVersion;
  } catch {
    // Not JSON: the native parser says so.
  }
  if (apiVersion !== kopsApiVersion) return parseCertificatesRequest(input);
  return kopsProofRequest(input);
}

/** One row per policy, in chain order; `decides` marks the policy whose verdict stands. */
export interface ExplainRow {
  policy: string;
  verdict: PolicyDecision['verdict'];
  decides: boolean;
  node?: string;
  instanceGroup?: string;
  reasons: string[];
}

/** The rows and the overall decision of an evaluated chain (pure). */
export function explainRows(chain: ChainDecision): { rows: ExplainRow[]; decision: ExplainRow } {
  const rowOf = (policy: string, decision: PolicyDecision, decides: boolean): ExplainRow => {
    const row: ExplainRow = { policy, verdict: decision.verdict, decides, reasons: [] };
    const facts = decision.verdict === 'approve' || decision.verdict === 'queue' ? decision.facts : undefined;
    if (facts) row.node = facts.nodeName;
    if (facts?.instanceGroup) row.instanceGroup = facts.instanceGroup;
    // The operator runs explain, so the detail a node is never told is shown too.
    const detail = (auditDetailOf(decision).detail ?? []).map((d) => `detail: ${d}`);
    row.reasons = [...decision.reasons, ...detail];
    return row;
  };
  return {
    rows: chain.trail.map(({ policy, decision }) => rowOf(policy, decision, policy === chain.decidedBy)),
    decision: rowOf(chain.decidedBy ?? '(none)', chain.decision, true),
  };
}

/** The `explain` command. */
export function explainCommand(): Command {
  const command = new Command('explain')
    .description(
      'dry-run a bootstrap request or a CSR against the configured approval policies and print every ' +
        "policy's verdict and reasons; nothing is issued",
    )
    .requiredOption('--conf <file>', 'the kops-controller configuration (its bootstrap.policies chain)')
    .addOption(
      new Option(
        '--request <file>',
        'a bootstrap request body (JSON, docs/bootstrap-api.md), optionally with "authorization"',
      ).conflicts('csr'),
    )
    .addOption(
      new Option('--csr <file>', 'a kubelet CSR (PEM) to explain as a native request').conflicts('request'),
    )
    .option('--node <name>', 'with --csr: the node name the request claims')
    .addOption(
      new Option('--token <id.secret>', 'a bootstrap token to present (as Authorization: Bearer)').argParser(
        bootstrapTokenFlag('--token'),
      ),
    )
    .option('--remote-address <ip>', 'the address the request is to come from (metal checks it)', '127.0.0.1')
    .addOption(outputOption());
  return withKubeOptions(command).action(runExplain);
}

/** The request the flags name: the `--request` file's, or a native request around the `--csr` file (one is given). */
async function requestOfFlags(options: ExplainOptions): Promise<BootstrapRequest> {
  let files: { request?: string; csr?: string };
  if (options.request !== undefined) {
    files = { request: (await readInputFile(options.request, maxInputBytes, '--request')).toString('utf8') };
  } else {
    files = { csr: (await readInputFile(options.csr as string, maxInputBytes, '--csr')).toString('utf8') };
  }
  const input = explainInput(files, options);
  return requestOf({ ...input, remoteAddress: options.remoteAddress, receivedAt: new Date() });
}

/**
 * The policies' dependencies for a dry run: proofs spent only in a private replay guard, the API
 * server reached only by the policies that read it (bootstrap-token, metal, pki-tpm, renewal), the
 * state store only by metal and renewal, the cluster CA only by renewal.
 */
async function dryRunDeps(config: Config, options: ExplainOptions, logger: Logger) {
  const names = policyNamesOf(config);
  const sources: Parameters<typeof policyDepsFromConfig>[0] = {
    config,
    replayGuard: new MemoryReplayGuard(),
    logger,
  };
  if (['bootstrap-token', 'metal', 'pki-tpm', 'renewal'].some((name) => names.has(name))) {
    const { kubeConfig } = loadKubeConfig({ kubeconfig: options.kubeconfig, context: options.context });
    sources.core = makeClients(kubeConfig).core;
    sources.kubeConfig = kubeConfig;
  }
  if ((names.has('metal') || names.has('renewal')) && config.configBase) {
    sources.stateStore = openVfs(config.configBase);
  }
  if (names.has('renewal') && config.server) {
    sources.ca = (await signingAuthorities(config.server, undefined, undefined)).ca;
  }
  return policyDepsFromConfig(sources);
}

/** Prints the trail and the decision: as JSON or YAML, or a table whose last row is the decision. */
function printExplanation(
  cmd: Command,
  options: ExplainOptions,
  request: BootstrapRequest,
  { rows, decision }: ReturnType<typeof explainRows>,
): void {
  const document = {
    request: { claimedNodeName: request.claimedNodeName, proof: request.proof.kind },
    decision,
    trail: rows,
  };
  writeOut(
    cmd,
    formatOutput(options.output, document, {
      rows: [...rows, { ...decision, policy: `=> ${decision.policy}` }],
      columns: [
        { header: 'policy', value: (r) => r.policy },
        { header: 'verdict', value: (r) => r.verdict },
        { header: 'decides', value: (r) => (r.decides ? 'yes' : '') },
        { header: 'node', value: (r) => r.node },
        { header: 'group', value: (r) => r.instanceGroup },
        { header: 'reasons', value: (r) => r.reasons.join('; ') },
      ],
    }),
  );
}

/** Runs `explain`: the reserved names first, as the server checks them, then every policy. */
async function runExplain(options: ExplainOptions, cmd: Command): Promise<void> {
  if (options.request === undefined && options.csr === undefined) {
    throw new InvalidInputError('pass --request FILE or --csr FILE');
  }
  const logger = commandLogger(cmd);
  const config = await loadConfigFile(options.conf);
  const request = await requestOfFlags(options);
  const reserved = await loadReservedNames(config, { apiServers: config.bootstrap.apiServers, logger });
  assertNoReservedNamesIn(request.certificates, { nodeName: request.claimedNodeName }, reserved);
  const { deps, close } = await dryRunDeps(config, options, logger);
  try {
    const policies = await buildPolicies(config, deps);
    const chain = await evaluateChain(
      policies,
      request,
      { now: () => new Date() },
      { stopAtDecision: false },
    );
    const explained = explainRows(chain);
    printExplanation(cmd, options, request, explained);
    // Scripts read the verdict from the exit code: a denial is 77, as for `join` denied by a policy;
    // approve and queue (a person decides later) are 0.
    if (explained.decision.verdict === 'deny') {
      const by = chain.decidedBy ? ` by ${chain.decidedBy}` : '';
      throw new ForbiddenError(`the request would be denied${by}: ${explained.decision.reasons.join('; ')}`);
    }
  } finally {
    close();
  }
}
