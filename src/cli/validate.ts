/**
 * `kops-controller validate`: `kops validate cluster` from inside the cluster's own tooling — the
 * instance groups against what the cloud runs, every machine joined, every node Ready, and the
 * critical and control-plane pods running. Prints kops' sections (or JSON/YAML) and fails when the
 * cluster is not ready; `--wait` and `--count` wait for it, as kops does.
 */
import { Command, Option } from 'commander';
import { parseDuration } from '../config/duration.ts';
import { loadConfigFile } from '../config/loader.ts';
import { InvalidInputError, KopsError } from '../errors.ts';
import { loadKubeConfig } from '../kube/client.ts';
import type { InstanceGroup } from '../statestore/kops-types.ts';
import { vfsOptionsFromEnv } from '../statestore/open.ts';
import { gatherValidationInput } from '../validation/gather.ts';
import { roleName, type ValidationResult, validateCluster } from '../validation/validate-cluster.ts';
import { commandLogger, type KubeOptions, withKubeOptions } from './common.ts';
import { formatOutput, outputOption, renderTable, writeOut } from './output.ts';

interface ValidateOptions extends KubeOptions {
  conf: string;
  output: string;
  maxUnreadyNodes: string;
  wait: string;
  count: string;
  interval: string;
}

function nonNegativeInteger(value: string, flag: string): number {
  if (!/^\d{1,6}$/.test(value)) throw new InvalidInputError(`${flag} ${value}: expected a whole number`);
  return Number(value);
}

function duration(value: string, flag: string): number {
  try {
    return parseDuration(value);
  } catch (err) {
    throw new InvalidInputError(`${flag} ${value}: ${(err as Error).message}`, { cause: err });
  }
}

/** kops' table output: instance groups, node status, validation errors, and the verdict. */
export function formatValidationTable(
  clusterName: string,
  instanceGroups: readonly InstanceGroup[],
  result: ValidationResult,
): string {
  const sections = [
    'INSTANCE GROUPS',
    renderTable(instanceGroups, [
      { header: 'NAME', value: (ig) => ig.metadata.name },
      { header: 'ROLE', value: (ig) => roleName(ig.spec.role) },
      { header: 'MACHINETYPE', value: (ig) => ig.spec.machineType ?? '' },
      { header: 'MIN', value: (ig) => String(ig.spec.minSize ?? '') },
      { header: 'MAX', value: (ig) => String(ig.spec.maxSize ?? '') },
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
  return withKubeOptions(
    new Command('validate')
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
        new Option('--max-unready-nodes <n>', 'worker nodes that may be unready without failing').default(
          '0',
        ),
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
      .addOption(new Option('--interval <duration>', 'time between validations').default('10s')),
  ).action(async (options: ValidateOptions, command: Command) => {
    const logger = commandLogger(command);
    const maxUnreadyNodes = nonNegativeInteger(options.maxUnreadyNodes, '--max-unready-nodes');
    const count = nonNegativeInteger(options.count, '--count');
    const waitMs = duration(options.wait, '--wait');
    const intervalMs = duration(options.interval, '--interval');
    if (count < 1) throw new InvalidInputError('--count must be at least 1');
    if (count > 1 && waitMs === 0) throw new InvalidInputError('--count above 1 needs --wait');
    const config = await loadConfigFile(options.conf);
    const { kubeConfig } = loadKubeConfig({ kubeconfig: options.kubeconfig, context: options.context });
    const deadline = Date.now() + waitMs;
    let passes = 0;
    for (;;) {
      const input = await gatherValidationInput({
        config,
        kubeConfig,
        vfsOptions: { ...vfsOptionsFromEnv(process.env), env: process.env },
        logger,
      });
      const result = validateCluster({ ...input, maxUnreadyNodes });
      passes = result.failures.length === 0 ? passes + 1 : 0;
      const done = passes >= count || Date.now() + intervalMs > deadline;
      // While waiting, only the last attempt is printed; progress goes to the log.
      if (done) {
        writeOut(
          command,
          options.output === 'table'
            ? formatValidationTable(config.clusterName, input.instanceGroups, result)
            : formatOutput(options.output, result),
        );
      } else {
        logger.info({ failures: result.failures.length, passes }, 'cluster validated; trying again');
      }
      if (passes >= count) return;
      if (done) {
        throw new KopsError(
          'unavailable',
          waitMs > 0
            ? `validation failed: the cluster was not ready ${count} time(s) in a row within ${options.wait}`
            : `validation failed: the cluster is not ready (${result.failures.length} errors)`,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, intervalMs));
    }
  });
}
