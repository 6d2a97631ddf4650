#!/usr/bin/env node
/**
 * The `kops-controller` program: the controller (`run`), the local simulator (`dev`), the admin CLI
 * and the node-side join client. This module wires the commands and is the one place where errors
 * become an exit code and one readable line.
 */
import { readFileSync } from 'node:fs';
import { Command, CommanderError, Option } from 'commander';
import { describeError, exitCodeOf, KopsError } from '../errors.ts';
import { commandNames, loadCommands } from './commands.ts';
import { logFormatOption } from './common.ts';

const packageJson = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
  version: string;
};

/** Builds the program with the named subcommands (default: all of them). */
export async function buildProgram(names: readonly string[] = commandNames): Promise<Command> {
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
    .addOption(logFormatOption())
    .showHelpAfterError('(run with --help for usage)')
    .configureHelp({ sortSubcommands: true })
    .exitOverride();
  for (const command of await loadCommands(names)) program.addCommand(command);
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
  try {
    const program = await buildProgram(commandsNeeded(argv));
    await program.parseAsync([...argv], { from: 'user' });
    return 0;
  } catch (err) {
    if (err instanceof CommanderError) {
      // Commander has already printed its message (usage errors, --help, --version).
      return err.exitCode === 1 ? 2 : err.exitCode;
    }
    process.stderr.write(`kops-controller: ${errorLine(err)}\n`);
    const code = exitCodeOf(err);
    // The error is the command's answer: something it left running (a listener, a component that
    // ignored its stop signal) must not keep the process alive, or a pod would hang instead of being
    // restarted. Unreferenced, so a process that ends by itself ends at once.
    setTimeout(() => process.exit(code), 2_000).unref();
    return code;
  }
}

/**
 * The subcommands a command line needs: only the one it names, so its start-up does not import every
 * other command's dependencies; all of them for help or anything unrecognised.
 */
export function commandsNeeded(argv: readonly string[]): readonly string[] {
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    if (arg === '-v' || arg === '--v' || arg === '--log-format') {
      i++; // its value
      continue;
    }
    if (arg === '--version') return [];
    if (arg.startsWith('-')) continue;
    return commandNames.includes(arg) ? [arg] : commandNames;
  }
  return commandNames;
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
