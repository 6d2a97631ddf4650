#!/usr/bin/env node
/**
 * The `kops-controller` program: the controller (`run`), the local simulator (`dev`), the admin CLI
 * and the node-side join client. This module wires the commands and is the one place where errors
 * become an exit code and one readable line.
 */
import { readFileSync } from 'node:fs';
import { Command, CommanderError, Option } from 'commander';
import { describeError, exitCodeOf, KopsError } from '../errors.ts';
import { commandsOf } from './commands.ts';

const packageJson = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
  version: string;
};

/** Builds the program; `write*` let tests capture what a command prints. */
export function buildProgram(): Command {
  const program = new Command('kops-controller')
    .description(
      'Makes the machines of a self-managed Kubernetes cluster find and trust each other, labels every node ' +
        'from its instance group, and reports cluster health to Prometheus.',
    )
    .version(packageJson.version, '--version', 'print the version and exit')
    .addOption(
      new Option('-v, --v <level>', 'log verbosity, as klog: 0 warnings, 2 info, 4 debug, 6 trace').default(
        '2',
      ),
    )
    .showHelpAfterError('(run with --help for usage)')
    .configureHelp({ sortSubcommands: true })
    .exitOverride();
  for (const command of commandsOf()) program.addCommand(command);
  // Usage errors anywhere in the tree must reach main()'s handler instead of exiting the process.
  const overrideExits = (command: Command): void => {
    command.exitOverride();
    for (const sub of command.commands) overrideExits(sub);
  };
  overrideExits(program);
  return program;
}

/** Runs the program with `argv` (without node and script) and returns the exit code. */
export async function main(argv: readonly string[]): Promise<number> {
  const program = buildProgram();
  try {
    await program.parseAsync([...argv], { from: 'user' });
    return 0;
  } catch (err) {
    if (err instanceof CommanderError) {
      // Commander has already printed its message (usage errors, --help, --version).
      return err.exitCode === 1 ? 2 : err.exitCode;
    }
    process.stderr.write(`kops-controller: ${errorLine(err)}\n`);
    return exitCodeOf(err);
  }
}

/** One readable line for an error; internal errors say that they are bugs. */
export function errorLine(err: unknown): string {
  const text = describeError(err);
  if (err instanceof KopsError && err.kind !== 'internal') return text;
  return `internal error: ${text} (this is a bug; rerun with -v 6 and report it)`;
}

if (import.meta.main) {
  process.exitCode = await main(process.argv.slice(2));
}
