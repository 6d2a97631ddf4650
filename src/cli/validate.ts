/**
 * `kops-controller validate`: `kops validate cluster` from inside the cluster's own tooling — the
 * instance groups against what the cloud runs, every machine joined, every node Ready, and the
 * critical and control-plane pods running. Prints kops' sections (or JSON/YAML) and fails when the
 * cluster is not ready; `--wait` and `--count` wait for it, as kops does.
 */
import { setTimeout as delay } from 'node:timers/promises';
import { Command, Option } from 'commander';
import { loadConfigFile } from '../config/loader.ts';
import {
  describeError,
  InvalidInputError,
  isRetryable,
  type KopsError,
  UnavailableError,
} from '../errors.ts';
import { loadKubeConfig } from '../kube/client.ts';
import type { InstanceGroup } from '../statestore/kops-types.ts';
import { vfsOptionsFromEnv } from '../statestore/open.ts';
import { kopsValidationCluster } from '../validation/kops-output.ts';
import { type ValidationResult, validateCluster } from '../validation/validate-cluster.ts';
import { gatherValidationInput } from '../validation-io/gather.ts';
import { commandLogger, durationFlag, type KubeOptions, withKubeOptions } from './common.ts';
import { formatOutput, outputOption, renderTable, writeOut } from './output.ts';

interface ValidateOptions extends KubeOptions {
  conf: string;
  output: string;
  maxUnreadyNodes: string;
  wait: string;
  count: string;
  interval: string;
  instanceGroup?: string[];
}

/** `--instance-group a,b --instance-group c`: the names, as kops' rolling-update takes them. */
function collectNames(value: string, previous: string[] = []): string[] {
  return [...previous, ...value.split(',').map((name) => name.trim())].filter((name) => name !== '');
}

/** One line for the operator while `--wait` waits: the attempt and its verdict. */
function progressLine(attempt: number, verdict: string, interval: string): string {
  return `validation attempt ${attempt}: ${verdict}; validating again in ${interval}\n`;
}

/** An attempt's verdict: ready so many times in a row, or not ready with its first failures. */
function verdictOf(result: ValidationResult, passes: number, count: number): string {
  const failures = result.failures;
  if (failures.length === 0) return `ready (${passes} of ${count} in a row)`;
  const named = failures.slice(0, 3).map((f) => `${f.type}/${f.name}`);
  if (failures.length > 3) named.push('…');
  return `not ready, ${failures.length} failure${failures.length === 1 ? '' : 's'} (${named.join(', ')})`;
}

function nonNegativeInteger(value: string, flag: string): number {
  if (!/^\d{1,6}$/.test(value)) throw new InvalidInputError(`${flag} ${value}: expected a whole number`);
  return Number(value);
}

/** A size as kops' table prints it (cmd/kops/get_instancegroups.go int32PointerToString): `-` when unset. */
const sizeCell = (size: number | undefined) => (size === undefined ? '-' : String(size));

/**
 * kops' table output (cmd/kops/validate_cluster.go validateClusterOutputTable): instance groups with
 * their spec role (`ControlPlane`, `Node`, …; the node list has validation's lower-case roles), node
 * status, validation errors, and the verdict.
 */
export function formatValidationTable(
  clusterName: string,
  instanceGroups: readonly InstanceGroup[],
  result: ValidationResult,
): string {
  const sections = [
    'INSTANCE GROUPS',
    renderTable(instanceGroups, [
      { header: 'NAME', value: (ig) => ig.metadata.name },
      { header: 'ROLE', value: (ig) => ig.spec.role },
      { header: 'MACHINETYPE', value: (ig) => ig.spec.machineType ?? '' },
      { header: 'MIN', value: (ig) => sizeCell(ig.spec.minSize) },
      { header: 'MAX', value: (ig) => sizeCell(ig.spec.maxSize) },
      { header: 'SUBNETS', value: (ig) => (ig.spec.subnets ?? []).join(',') },
    ]),
    'NODE STATUS',
    renderTable(result.nodes, [
      { header: 'NAME', value: (n) => n.name },
      { header: 'ROLE', value: (n) => n.role },
      { header: 'READY', value: (n) => n.status },
    ]),
  ];
  if (result.failures.length > 0) {
    sections.push(
      'VALIDATION ERRORS',
      renderTable(result.failures, [
        { header: 'KIND', value: (f) => f.type },
        { header: 'NAME', value: (f) => f.name },
        { header: 'MESSAGE', value: (f) => f.message },
      ]),
      'Validation Failed\n',
    );
  } else {
    sections.push(`Your cluster ${clusterName} is ready\n`);
  }
  return sections.join('\n');
}

/** The `validate` command. */
export function validateCommand(): Command {
  const command = new Command('validate')
    .description(
      'validate the cluster as `kops validate cluster` does: instance groups, machines, nodes, critical pods',
    )
    .addOption(
      new Option('--conf <file>', 'the controller configuration').default(
        '/etc/kubernetes/kops-controller/config.yaml',
      ),
    )
    .addOption(outputOption())
    .addOption(
      new Option('--max-unready-nodes <n>', 'worker nodes that may be unready without failing').default('0'),
    )
    .addOption(
      new Option(
        '--wait <duration>',
        'keep validating until the cluster is ready or this time is up',
      ).default('0s'),
    )
    .addOption(
      new Option('--count <n>', 'consecutive successful validations required (with --wait)').default('1'),
    )
    .addOption(new Option('--interval <duration>', 'time between validations').default('10s'))
    .addOption(
      new Option(
        '--instance-group <names>',
        'validate only these instance groups (comma-separated or repeated; default all); critical pods are checked all the same',
      ).argParser(collectNames),
    );
  return withKubeOptions(command).action(runValidate);
}

/** How `validate` repeats: the unready nodes forgiven, the passes in a row needed, the wait and interval. */
function repetitionOf(options: ValidateOptions) {
  const maxUnreadyNodes = nonNegativeInteger(options.maxUnreadyNodes, '--max-unready-nodes');
  const count = nonNegativeInteger(options.count, '--count');
  const waitMs = durationFlag('--wait', options.wait);
  const intervalMs = durationFlag('--interval', options.interval);
  if (count < 1) throw new InvalidInputError('--count must be at least 1');
  if (count > 1 && waitMs === 0) throw new InvalidInputError('--count above 1 needs --wait');
  return { maxUnreadyNodes, count, waitMs, intervalMs };
}

/** Why the command fails when the cluster never became ready. */
function notReadyError(
  options: ValidateOptions,
  count: number,
  waitMs: number,
  result: ValidationResult,
): KopsError {
  if (waitMs > 0) {
    return new UnavailableError(
      `validation failed: the cluster was not ready ${count} time(s) in a row within ${options.wait}`,
    );
  }
  const errors = result.failures.length === 1 ? 'error' : 'errors';
  return new UnavailableError(
    `validation failed: the cluster is not ready (${result.failures.length} ${errors})`,
  );
}

/** Runs `validate`: gathers and validates until it passes `--count` times in a row or `--wait` is up. */
async function runValidate(options: ValidateOptions, command: Command): Promise<void> {
  const logger = commandLogger(command);
  const { maxUnreadyNodes, count, waitMs, intervalMs } = repetitionOf(options);
  const config = await loadConfigFile(options.conf);
  const { kubeConfig } = loadKubeConfig({ kubeconfig: options.kubeconfig, context: options.context });
  // Monotonic: a step of the wall clock must neither end the wait early nor prolong it.
  const deadline = performance.now() + waitMs;
  const writeErr = command.configureOutput().writeErr ?? ((text: string) => process.stderr.write(text));
  const vfsOptions = { ...vfsOptionsFromEnv(process.env), env: process.env };
  // kops prints this once, before validating, and for the table only (RunValidateCluster).
  if (options.output === 'table') writeOut(command, `Validating cluster ${config.clusterName}\n\n`);
  const instanceGroupFilter = options.instanceGroup ?? [];
  const validateOnce = async () => {
    const input = await gatherValidationInput({ config, kubeConfig, vfsOptions, logger });
    return { input, result: validateCluster({ ...input, maxUnreadyNodes, instanceGroupFilter }) };
  };
  const outOfTime = () => performance.now() + intervalMs > deadline;
  let passes = 0;
  for (let attempt = 1; ; attempt++) {
    let attempted: Awaited<ReturnType<typeof validateOnce>>;
    try {
      attempted = await validateOnce();
    } catch (err) {
      // As kops' RunValidateCluster with --wait ("(will retry): unexpected error during validation"):
      // an outage or a deadline may pass while it waits; an error waiting cannot mend (bad input, no
      // instance group, no permission) ends it at once. Past the time, the last error is the answer.
      if (waitMs === 0 || !isRetryable(err) || outOfTime()) throw err;
      passes = 0;
      const verdict = `unexpected error during validation (will retry): ${describeError(err)}`;
      writeErr(progressLine(attempt, verdict, options.interval));
      // node:timers keeps the process alive while it waits (src/runtime/clock.ts's timers are unref'd).
      await delay(intervalMs);
      continue;
    }
    const { input, result } = attempted;
    passes = result.failures.length === 0 ? passes + 1 : 0;
    const done = passes >= count || outOfTime();
    // While waiting, only the last attempt is printed in full; a line per attempt shows progress.
    if (!done) writeErr(progressLine(attempt, verdictOf(result, passes, count), options.interval));
    else if (options.output === 'table') {
      writeOut(command, formatValidationTable(config.clusterName, input.instanceGroups, result));
    } else writeOut(command, formatOutput(options.output, kopsValidationCluster(result)));
    if (passes >= count) return;
    if (done) throw notReadyError(options, count, waitMs, result);
    await delay(intervalMs);
  }
}
