/**
 * Structured JSON logging (pino) on standard error, so standard output stays free for command data.
 * Secrets never reach a log line: known secret-bearing fields are redacted at the logger, and callers
 * pass facts (names, ids, fingerprints), never key material or tokens.
 */
import { type Logger, pino } from 'pino';

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
