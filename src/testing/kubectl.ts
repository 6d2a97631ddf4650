/** kubectl, run against a simulated cluster the way an admin would, for end-to-end checks. */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { toolPath } from './tools.ts';

const run = promisify(execFile);

/** Whether `kubectl get nodes --show-labels` output shows `node` in instance group `group`. */
function labelled(kubectlOutput: string, node: string, group: string): boolean {
  const line = kubectlOutput.split('\n').find((l) => l.startsWith(`${node} `));
  return line?.includes(`kops.k8s.io/instancegroup=${group}`) ?? false;
}

/**
 * Polls `kubectl get nodes --show-labels` (bounded) until every `[node, instance group]` pair shows
 * its `kops.k8s.io/instancegroup` label; returns the last output and the pairs still unlabelled.
 */
export async function waitForGroupLabels(
  kubeconfigPath: string,
  expected: readonly (readonly [string, string])[],
): Promise<{ output: string; unlabelled: string[] }> {
  let output = '';
  for (let i = 0; i < 500; i++) {
    output = (
      await run(toolPath('kubectl'), ['--kubeconfig', kubeconfigPath, 'get', 'nodes', '--show-labels'])
    ).stdout;
    if (expected.every(([node, group]) => labelled(output, node, group))) break;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const unlabelled = expected
    .filter(([node, group]) => !labelled(output, node, group))
    .map(([n, g]) => `${n} (${g})`);
  return { output, unlabelled };
}
