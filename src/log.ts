/**
 * Structured JSON logging (pino) on standard error, so standard output stays free for command data.
 * Secrets never reach a log line: known secret-bearing fields are redacted at the logger, and callers
 * pass facts (names, ids, fingerprints), never key material or tokens. A reader of standard error
 * that does not keep up costs log lines, counted, never the event loop (src/log-sink.ts).
 */
import { type Logger, pino } from 'pino';
import { describeError } from './errors.ts';
import { stderrLinesDropped, stderrSink } from './log-sink.ts';

export type { Logger } from 'pino';

/** Field paths that may hold secrets anywhere in a log record; their values are replaced. */
const redactedPaths = [
  'token',
  'password',
  'secret',
  'privateKey',
  'key',
  'authorization',
  '*.token',
  '*.password',
  '*.secret',
  '*.privateKey',
  '*.key',
  '*.authorization',
  'headers.authorization',
  'req.headers.authorization',
  'req.headers["x-aws-sts"]',
];

/**
 * Maps the klog-style verbosity used by kops (`--v=2`) to a pino level: 0 → warn, 1–3 → info,
 * 4–5 → debug, 6+ → trace. Anything but a whole number of 0 or more is a caller's bug (the CLI refuses it).
 */
export function levelForVerbosity(verbosity: number): pino.Level {
  if (!Number.isInteger(verbosity) || verbosity < 0) {
    throw new RangeError(`verbosity must be a whole number of 0 or more, not ${verbosity}`);
  }
  if (verbosity === 0) return 'warn';
  if (verbosity < 4) return 'info';
  if (verbosity < 6) return 'debug';
  return 'trace';
}

/** How records are written: one JSON object a line (for collectors) or one readable line (for people). */
export const logFormats = ['json', 'text'] as const;
export type LogFormat = (typeof logFormats)[number];

export interface LoggerOptions {
  level?: pino.Level | 'silent';
  /** Default `json`. */
  format?: LogFormat;
  /** Where records go; defaults to standard error. */
  destination?: pino.DestinationStream;
}

/** Whether a record carries `component` more than once (a supervisor's binding and the component's own). */
function repeatsComponent(line: string): boolean {
  const first = line.indexOf('"component":');
  return first !== -1 && line.indexOf('"component":', first + 1) !== -1;
}

/**
 * The final form of a record. pino appends a child's bindings to its parent's without looking, so a
 * component that names itself under a supervisor that named it too would write `component` twice;
 * parsing keeps the innermost value once. `text` renders `msg key=value ...` after the level.
 */
function finishRecord(format: LogFormat, line: string): string {
  // Most JSON lines name no key twice: pass them through without parsing (the bootstrap server logs
  // every request, so this is on its hot path).
  if (format === 'json' && !repeatsComponent(line)) return line;
  const record = JSON.parse(line) as Record<string, unknown>;
  if (format === 'json') return `${JSON.stringify(record)}\n`;
  const { level, time: _time, name: _name, msg, ...fields } = record;
  const pairs = Object.entries(fields).map(
    ([key, value]) =>
      `${key}=${typeof value === 'string' && /^[^\s"=]+$/.test(value) ? value : JSON.stringify(value)}`,
  );
  return `kops-controller: ${String(level)}: ${[msg ?? '', ...pairs].join(' ')}\n`;
}

/** Creates the process logger. */
export function createLogger(options: LoggerOptions = {}): Logger {
  const format = options.format ?? 'json';
  const logger = pino(
    {
      level: options.level ?? 'info',
      base: { name: 'kops-controller' },
      timestamp: pino.stdTimeFunctions.isoTime,
      redact: { paths: redactedPaths, censor: '[redacted]' },
      formatters: { level: (label) => ({ level: label }) },
      hooks: { streamWrite: (line) => finishRecord(format, line) },
    },
    options.destination ?? stderrSink(),
  );
  if (!options.destination) {
    // The logger made last is the one the process uses (a command makes one): its format says it.
    stderrSink().reportDropsWith((dropped) =>
      logger.warn(
        { droppedLines: dropped },
        'standard error was not read fast enough; log lines were dropped',
      ),
    );
  }
  return logger;
}

/** Log lines this process dropped because standard error was not read fast enough (or not at all). */
export function logLinesDropped(): number {
  return stderrLinesDropped();
}

/**
 * Writes `line` (with its newline) on standard error as the last word of a process about to end (a
 * failed command's error, a fatal exit's reason): after the log lines still waiting for a slow
 * reader, in the same one wait for it at exit (at most 2 s), so it comes last or, when the reader
 * has not taken those by then, not at all. It waits for nothing itself.
 */
export function writeLastLine(line: string): void {
  stderrSink().finalLine(line);
}

/** A logger that drops everything, for tests and library defaults. */
export const silentLogger: Logger = pino({ level: 'silent' });

/** Options of {@link RecurringFailureLog}. */
export interface RecurringFailureLogOptions {
  /** The message of each failure's line. */
  message: string;
  /** The message of the line that ends a run of failures; none when not given. */
  recoveredMessage?: string;
  /** Level of the lines that are written (default `warn`); the others go out at `debug`. */
  level?: 'warn' | 'error';
  /** How long the same failure stays quiet after its line (default 10 minutes). */
  quietMs?: number;
  /** Milliseconds, monotonic or not; default `performance.now`. */
  now?: () => number;
}

/** How many distinct failures {@link RecurringFailureLog} remembers: those seen most recently. */
const rememberedFailures = 8;

/**
 * The log of something retried for as long as it fails (a watch, a periodic write, a supervised
 * component). Each distinct failure (by its description) is written at the chosen level the first
 * time, and again once `quietMs` has passed since its last line, with how many failures there were in
 * a row (and how many of that one were held back since its last line: `repeated`); the rest go out at
 * `debug`. So a condition that lasts (a permission RBAC does not grant, a dependency down for a day)
 * shows in the log every ten minutes, not every backoff, and so do failures that alternate (503,
 * timeout, 503, …), while every new kind of failure still shows at once. The
 * {@link rememberedFailures} seen most recently are remembered; one forgotten is news again. The
 * metrics of the caller count every failure.
 */
export class RecurringFailureLog {
  readonly #logger: Logger;
  readonly #options: RecurringFailureLogOptions;
  readonly #now: () => number;
  #failures = 0;
  /** By description, in the order last seen: when its line was written, and how many were held back since. */
  readonly #recent = new Map<string, { writtenAt: number; held: number }>();

  constructor(logger: Logger, options: RecurringFailureLogOptions) {
    this.#logger = logger;
    this.#options = options;
    this.#now = options.now ?? (() => performance.now());
  }

  /** Failures in a row so far. */
  get failures(): number {
    return this.#failures;
  }

  /** One more failure; `fields` go on its line. */
  failed(err: unknown, fields: Record<string, unknown> = {}): void {
    this.#failures++;
    const summary = describeError(err);
    const now = this.#now();
    const known = this.#recent.get(summary);
    const record = { ...fields, err: summary, failures: this.#failures };
    // Seen now: the last to be forgotten.
    this.#recent.delete(summary);
    if (known && now - known.writtenAt < (this.#options.quietMs ?? 600_000)) {
      this.#recent.set(summary, { ...known, held: known.held + 1 });
      this.#logger.debug(record, this.#options.message);
      return;
    }
    // The count held back is this failure's own: on its line again, never on another's.
    const repeated = known && known.held > 0 ? { repeated: known.held } : {};
    this.#logger[this.#options.level ?? 'warn']({ ...record, ...repeated }, this.#options.message);
    this.#recent.set(summary, { writtenAt: now, held: 0 });
    if (this.#recent.size > rememberedFailures) {
      this.#recent.delete(this.#recent.keys().next().value as string);
    }
  }

  /** The thing worked again: ends a run of failures, with one line if a message was given. */
  succeeded(): void {
    if (this.#failures === 0) return;
    if (this.#options.recoveredMessage !== undefined) {
      this.#logger.info({ failures: this.#failures }, this.#options.recoveredMessage);
    }
    this.#failures = 0;
    this.#recent.clear();
  }
}

/** Control characters and terminal escapes from a remote party never reach the operator's terminal. */
export function printable(text: string, max = 200): string {
  const clean = text.replace(/[\u0000-\u001f\u007f-\u009f]+/g, ' ').trim();
  return clean.length > max ? `${clean.slice(0, max)}…` : clean;
}
