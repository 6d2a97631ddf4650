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
 * 4–5 → debug, 6+ → trace.
 */
export function levelForVerbosity(verbosity: number): pino.Level {
  if (verbosity <= 0) return 'warn';
  if (verbosity < 4) return 'info';
  if (verbosity < 6) return 'debug';
  return 'trace';
}

export interface LoggerOptions {
  level?: pino.Level | 'silent';
  /** Where records go; defaults to standard error. */
  destination?: pino.DestinationStream;
}

/** Creates the process logger. */
export function createLogger(options: LoggerOptions = {}): Logger {
  return pino(
    {
      level: options.level ?? 'info',
      base: { name: 'kops-controller' },
      timestamp: pino.stdTimeFunctions.isoTime,
      redact: { paths: redactedPaths, censor: '[redacted]' },
      formatters: { level: (label) => ({ level: label }) },
    },
    options.destination ?? pino.destination({ fd: 2, sync: true }),
  );
}

/** A logger that drops everything, for tests and library defaults. */
export const silentLogger: Logger = pino({ level: 'silent' });
