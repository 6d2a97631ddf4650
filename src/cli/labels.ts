/**
 * `kops-controller labels`: previews the labels the nodes of an instance group get, from the kops
 * YAML an operator is about to apply — before the change reaches any node.
 */
import { readFile } from 'node:fs/promises';
import { Command } from 'commander';
import { fileErrorReason, NotFoundError } from '../errors.ts';
import { explainNodeLabels, labelFeaturesOf } from '../nodelabels/build-node-labels.ts';
import { parseCluster, parseInstanceGroup } from '../statestore/kops-types.ts';
import { commandLogger } from './common.ts';
import { formatOutput, outputOption } from './output.ts';

interface LabelsOptions {
  cluster: string;
  instanceGroup: string;
  output: string;
}

async function readInput(path: string, flag: string): Promise<string> {
  try {
    return await readFile(path, 'utf8');
  } catch (err) {
    throw new NotFoundError(
      `cannot read ${flag} ${path}: ${fileErrorReason(err)}; ` +
        `export it with \`kops get ${flag === '--cluster' ? 'cluster' : 'ig NAME'} -o yaml\``,
    );
  }
}

/** The `labels` command. */
export function labelsCommand(): Command {
  return new Command('labels')
    .description(
      'print the labels the nodes of an instance group get (kops v1alpha2 YAML in; label → value out)',
    )
    .requiredOption('--cluster <file>', 'the kops Cluster YAML (`kops get cluster -o yaml`)')
    .requiredOption('--instance-group <file>', 'the kops InstanceGroup YAML (`kops get ig NAME -o yaml`)')
    .addOption(outputOption())
    .action(async (options: LabelsOptions, command: Command) => {
      const cluster = parseCluster(await readInput(options.cluster, '--cluster'), options.cluster);
      const ig = parseInstanceGroup(
        await readInput(options.instanceGroup, '--instance-group'),
        options.instanceGroup,
      );
      const owner = ig.metadata.labels?.['kops.k8s.io/cluster'];
      if (owner !== undefined && owner !== cluster.metadata.name) {
        commandLogger(command).warn(
          { instanceGroup: ig.metadata.name, owner, cluster: cluster.metadata.name },
          'the instance group belongs to another cluster',
        );
      }
      const labels = explainNodeLabels(cluster, ig, labelFeaturesOf(process.env['KOPS_FEATURE_FLAGS']));
      process.stdout.write(
        formatOutput(options.output, Object.fromEntries(labels.map((l) => [l.key, l.value])), {
          rows: labels,
          columns: [
            { header: 'label', value: (l) => l.key },
            { header: 'value', value: (l) => l.value },
            { header: 'source', value: (l) => l.source },
          ],
        }),
      );
    });
}
