/** Options and helpers shared by the commands, so every command spells them the same way. */
import { type Command, Option } from 'commander';
import { createLogger, type Logger, levelForVerbosity } from '../log.ts';

/** Options every command inherits from the program. */
export interface GlobalOptions {
  v: string;
}

/** Options of commands that talk to a Kubernetes API server. */
export interface KubeOptions {
  kubeconfig?: string;
  context?: string;
}

/** Adds `--kubeconfig` and `--context`, the way kubectl spells them. */
export function withKubeOptions(command: Command): Command {
  return command
    .addOption(
      new Option('--kubeconfig <path>', 'kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)'),
    )
    .addOption(new Option('--context <name>', 'kubeconfig context to use (default: its current-context)'));
}

/** The logger for a command, at the verbosity given by `-v`. */
export function commandLogger(command: Command): Logger {
  const { v } = command.optsWithGlobals<GlobalOptions>();
  return createLogger({ level: levelForVerbosity(Number(v)) });
}
