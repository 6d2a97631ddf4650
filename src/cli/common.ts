/** Options and helpers shared by the commands, so every command spells them the same way. */
import { type Command, Option } from 'commander';
import { parseDuration } from '../config/duration.ts';
import { InvalidInputError } from '../errors.ts';
import { createLogger, type LogFormat, type Logger, levelForVerbosity, logFormats } from '../log.ts';

/** `-v` when not given: info, as klog's `--v=2` that kops passes. */
export const defaultVerbosity = '2';

/** Options every command inherits from the program. */
export interface GlobalOptions {
  /** Absent when a command runs without the root program (as the tests run some). */
  v?: string;
  logFormat?: LogFormat;
}

/** `--log-format`, a program option: without it, only the servers log JSON (see commandLogger). */
export function logFormatOption(): Option {
  return new Option(
    '--log-format <format>',
    'log format: json (default for run and discovery serve) or text (default for the other commands)',
  ).choices(logFormats);
}

/** The commands that run as services; their logs go to a collector, so they default to JSON. */
const serviceCommands = new Set(['run', 'discovery serve']);

function commandPath(command: Command): string {
  const names: string[] = [];
  for (let c: Command | null = command; c?.parent; c = c.parent) names.unshift(c.name());
  return names.join(' ');
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

/**
 * The logger for a command, at the verbosity given by `-v`, in the format given by `--log-format`:
 * by default JSON for the services and one readable line for the commands people type.
 */
export function commandLogger(command: Command): Logger {
  const { v, logFormat } = command.optsWithGlobals<GlobalOptions>();
  return createLogger({
    level: levelForVerbosity(Number(v ?? defaultVerbosity)),
    format: logFormat ?? (serviceCommands.has(commandPath(command)) ? 'json' : 'text'),
  });
}

/**
 * `parse(value)` for the option `flag`; a refusal names the flag and the value, so the one line on
 * standard error says what to fix.
 */
export function flagValue<T>(flag: string, value: string, parse: (value: string) => T): T {
  try {
    return parse(value);
  } catch (err) {
    throw new InvalidInputError(`${flag} ${value}: ${(err as Error).message}`);
  }
}

/** Parses the Go duration `value` of `flag`; an error names the flag. */
export function durationFlag(flag: string, value: string): number {
  return flagValue(flag, value, parseDuration);
}

/** A repeatable option's values, in the order given. */
export function collect(value: string, previous: string[] = []): string[] {
  return [...previous, value];
}

/**
 * `-v`/`--v`: a klog verbosity, a whole number of 0 or more. Anything else is refused rather than read
 * as some level (Number("abc") is NaN, which no comparison bounds).
 */
export function verbosityOf(value: string): string {
  if (!/^\d{1,9}$/.test(value)) {
    throw new InvalidInputError(
      `--v ${value}: expected a whole number of 0 or more (0 warnings, 2 info, 4 debug, 6 trace)`,
    );
  }
  return String(Number(value));
}

/** A parser of a flag that takes a count of at least 1. */
export function countOf(flag: string): (value: string) => number {
  return (value) => {
    if (!/^[1-9]\d{0,6}$/.test(value)) {
      throw new InvalidInputError(`${flag} ${value}: expected a whole number from 1 to 9999999`);
    }
    return Number(value);
  };
}

/**
 * Adds `--<prefix>max-connections` and `--<prefix>max-connections-per-source`, the connection caps
 * (src/net/hardened-server.ts) of `server` (e.g. "the bootstrap server"), with their defaults.
 */
export function withConnectionCaps(
  command: Command,
  prefix: string,
  server: string,
  defaults: { maxConnections: number; maxConnectionsPerSource: number },
): Command {
  const total = `--${prefix}max-connections`;
  const perSource = `--${prefix}max-connections-per-source`;
  return command
    .addOption(
      new Option(`${total} <n>`, `connections ${server} holds at once; more are reset as they arrive`)
        .argParser(countOf(total))
        .default(defaults.maxConnections),
    )
    .addOption(
      new Option(
        `${perSource} <n>`,
        `connections ${server} holds at once from one address (raise it behind a proxy that hides client addresses)`,
      )
        .argParser(countOf(perSource))
        .default(defaults.maxConnectionsPerSource),
    );
}
