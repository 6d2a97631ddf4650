#!/usr/bin/env node
/**
 * The `kops-controller` program: the controller (`run`), the local simulator (`dev`), the admin CLI
 * and the node-side join client. This module wires the commands and is the one place where errors
 * become an exit code and one readable line.
 */
import { readFileSync } from 'node:fs';
import { Command, CommanderError, Option } from 'commander';
import { describeError, exitCodeOf, KopsError } from '../errors.ts';
import { writeLastLine } from '../log.ts';
import { commandNames, loadCommands } from './commands.ts';
import { defaultVerbosity, logFormatOption, verbosityOf } from './common.ts';
import { exitAfterGrace } from './exit-grace.ts';

const packageJson = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
  version: string;
};

/** What a usage error prints after its message, for every command (docs/operations.md, exit 2). */
const usageHint = '(run with --help for usage)';

/** Builds the program with the named subcommands (default: all of them). */
export async function buildProgram(names: readonly string[] = commandNames): Promise<Command> {
  const program = new Command('kops-controller')
    .description(
      'Makes the machines of a self-managed Kubernetes cluster find and trust each other, labels every node ' +
        'from its instance group, and reports cluster health to Prometheus. Without a command, options of ' +
        "`run` run the controller, as the Go kops-controller does: kops' DaemonSet passes " +
        '`--v=2 --conf=FILE`.',
    )
    .version(packageJson.version, '--version', 'print the version and exit')
    .addOption(
      new Option('-v, --v <level>', 'log verbosity, as klog: 0 warnings, 2 info, 4 debug, 6 trace')
        .argParser(verbosityOf)
        .default(defaultVerbosity),
    )
    .addOption(logFormatOption())
    .configureHelp({ sortSubcommands: true })
    .exitOverride();
  for (const command of await loadCommands(names)) program.addCommand(command);
  // Usage errors anywhere in the tree must reach main()'s handler instead of exiting the process,
  // and print the same hint as the program's (added commands inherit neither setting).
  const overrideExits = (command: Command): void => {
    command.exitOverride().showHelpAfterError(usageHint);
    for (const sub of command.commands) overrideExits(sub);
  };
  overrideExits(program);
  return program;
}

/** Runs the program with `argv` (without node and script) and returns the exit code. */
export async function main(argv: readonly string[]): Promise<number> {
  try {
    // klog's `-v=2`: Commander would read the value of the short option as "=2".
    const args = argv.map((arg) => (arg.startsWith('-v=') ? `-${arg}` : arg));
    const { program, line } = await programFor(args);
    await program.parseAsync(line, { from: 'user' });
    // The command has answered: what it abandoned (an instance-profile read the AWS SDK cannot cancel,
    // a pooled socket) must not keep the process alive, as after an error below.
    exitAfterGrace(0);
    return 0;
  } catch (err) {
    if (err instanceof CommanderError) {
      // Commander has already printed its message (usage errors, --help, --version).
      return err.exitCode === 1 ? 2 : err.exitCode;
    }
    // After the command's log lines still waiting for a slow reader, and written out with them
    // when the process exits (waiting for that reader at most 2 s, never holding the exit longer).
    writeLastLine(`kops-controller: ${errorLine(err)}\n`);
    const code = exitCodeOf(err);
    // The error is the command's answer: what it left running must not keep the process alive.
    exitAfterGrace(code);
    return code;
  }
}

/**
 * The program for a command line, and the line to parse. A line that names no command and gives only
 * options `run` takes is `run`'s: the Go kops-controller has that one mode, and kops' DaemonSet runs
 * it with `--v=2 --conf=…` and no command, so swapping the image in must keep working.
 */
async function programFor(args: readonly string[]): Promise<{ program: Command; line: string[] }> {
  const names = commandsNeeded(args);
  if (names === commandNames) {
    const program = await buildProgram(['run']);
    const line = implicitRunArgs(program, args);
    if (line) return { program, line };
  }
  return { program: await buildProgram(names), line: [...args] };
}

/**
 * `['run', ...args]` when `args` name no command and no help or version, and give options of the
 * program and of `run` only (at least one of run's when some option is unknown, so that run names
 * the unknown one); else undefined. Go's flag spellings become Commander's: `-conf=x` and `-conf x`
 * (one dash before a long name) are `--conf`, `-v=2` is `--v=2`.
 */
export function implicitRunArgs(program: Command, args: readonly string[]): string[] | undefined {
  const run = program.commands.find((command) => command.name() === 'run');
  if (!run || args.length === 0) return undefined; // no arguments at all: the help, as before
  const ofProgram = program.options.filter((option) => option.long !== '--version');
  const known = [...ofProgram, ...run.options];
  const line: string[] = [];
  let allKnown = true;
  let runOption = false;
  for (let i = 0; i < args.length; i++) {
    let arg = args[i] as string;
    if (arg === '--' || arg === '-h' || arg === '--help' || arg === '--version') return undefined;
    if (!arg.startsWith('-') || arg === '-') return undefined; // a command, a typo or an argument
    const goLong = /^-([a-z][a-z0-9-]+)(=.*)?$/.exec(arg);
    if (goLong && known.some((option) => option.long === `--${goLong[1]}`)) arg = `-${arg}`;
    if (arg.startsWith('-v=')) arg = `-${arg}`;
    line.push(arg);
    const long = arg.startsWith('--');
    const flag = long ? arg.split('=', 1)[0] : arg.slice(0, 2);
    const option = known.find((o) => (long ? o.long === flag : o.short === flag));
    if (!option) {
      allKnown = false;
      continue;
    }
    if (!ofProgram.includes(option)) runOption = true;
    const inline = long ? arg.includes('=') : arg.length > 2;
    if (!option.required && !option.optional) {
      if (inline) return undefined; // `--flag=x` of a switch, or bundled switches: Commander decides
      continue;
    }
    const next = args[i + 1];
    if (!inline && next !== undefined && (option.required || !next.startsWith('-'))) {
      line.push(next);
      i++;
    }
  }
  return allKnown || runOption ? ['run', ...line] : undefined;
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
