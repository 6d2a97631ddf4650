/**
 * Structured JSON logging (pino) on standard error, so standard output stays free for command data.
 * Secrets never reach a log line: known secret-bearing fields are redacted at the logger, and callers
 * pass facts (names, ids, fingerprints), never key material or tokens.
 */
import { type Logger, pino } from 'pino';
import { describeError } from './errors.ts';

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
  return pino(
    {
      level: options.level ?? 'info',
      base: { name: 'kops-controller' },
      timestamp: pino.stdTimeFunctions.isoTime,
      redact: { paths: redactedPaths, censor: '[redacted]' },
      formatters: { level: (label) => ({ level: label }) },
      hooks: { streamWrite: (line) => finishRecord(format, line) },
    },
    options.destination ?? pino.destination({ fd: 2, sync: true }),
  );
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

/**
 * The log of something retried for as long as it fails (a watch, a periodic write, a supervised
 * component). The first failure, a failure that differs from the last one written, and the same one
 * again once `quietMs` has passed are written at the chosen level, each with how many failures there
 * were in a row (and, on the same failure's next line, how many were held back: `repeated`); the rest go out at
 * `debug`. So a condition that lasts (a permission RBAC does not grant, a dependency down for a day)
 * shows in the log every ten minutes, not every backoff, while every new kind of failure still shows
 * at once. The metrics of the caller count every failure.
 */
export class RecurringFailureLog {
  readonly #logger: Logger;
  readonly #options: RecurringFailureLogOptions;
  readonly #now: () => number;
  #failures = 0;
  #held = 0;
  #lastWritten: { summary: string; at: number } | undefined;

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
    const last = this.#lastWritten;
    const record = { ...fields, err: summary, failures: this.#failures };
    if (last?.summary === summary && now - last.at < (this.#options.quietMs ?? 600_000)) {
      this.#held++;
      this.#logger.debug(record, this.#options.message);
      return;
    }
    // The count held back belongs to the failure written last: on its own line again, not on another's.
    const repeated = last?.summary === summary && this.#held > 0 ? { repeated: this.#held } : {};
    this.#logger[this.#options.level ?? 'warn']({ ...record, ...repeated }, this.#options.message);
    this.#lastWritten = { summary, at: now };
    this.#held = 0;
  }

  /** The thing worked again: ends a run of failures, with one line if a message was given. */
  succeeded(): void {
    if (this.#failures === 0) return;
    if (this.#options.recoveredMessage !== undefined) {
      this.#logger.info({ failures: this.#failures }, this.#options.recoveredMessage);
    }
    this.#failures = 0;
    this.#held = 0;
    this.#lastWritten = undefined;
  }
}

/** Control characters and terminal escapes from a remote party never reach the operator's terminal. */
export function printable(text: string, max = 200): string {
  const clean = text.replace(/[\u0000-\u001f\u007f-\u009f]+/g, ' ').trim();
  return clean.length > max ? `${clean.slice(0, max)}…` : clean;
}
