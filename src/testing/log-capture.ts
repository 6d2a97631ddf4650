/** A logger whose lines a test reads back: the product's own logger, writing into an array. */
import { Writable } from 'node:stream';
import { createLogger, type Logger, type LoggerOptions } from '../log.ts';

/** The product's logger (`createLogger`, info by default) with every line it writes kept in `lines`. */
export function capturedLogger(options: Omit<LoggerOptions, 'destination'> = {}): {
  logger: Logger;
  lines: string[];
} {
  const lines: string[] = [];
  const destination = new Writable({
    write(chunk, _encoding, done) {
      lines.push(String(chunk));
      done();
    },
  });
  return { logger: createLogger({ level: 'info', ...options, destination }), lines };
}
