/**
 * The log of a work queue's failed keys: one line per cause and ten minutes, not one per key and
 * attempt. A cause is the error's summary with the key's own name taken out, so that 5,000 nodes
 * failing on one cloud outage (or one API-server outage naming each node in its message) are one
 * cause. Each cause has a `RecurringFailureLog` (src/log.ts): its first failure is written, then the
 * same one every ten minutes with the count held back, the others go out at debug. How many causes
 * are remembered is bounded; past that, failures of further causes share one more such log, so a
 * flood of distinct messages still writes a bounded number of lines. `workqueue_retries_total`
 * counts every failure.
 */
import { describeError } from '../errors.ts';
import { type Logger, RecurringFailureLog } from '../log.ts';

/** Options of {@link FailureCauses}. */
export interface FailureCausesOptions {
  /** The message of each line. */
  message: string;
  /** Causes remembered at once (default 32); failures of more share one line per `quietMs`. */
  maxCauses?: number;
  /** How long the same cause stays quiet after its line (default 10 minutes). */
  quietMs?: number;
  /** Milliseconds, monotonic. */
  now: () => number;
}

/** The longest cause kept and written; a summary is the failing party's to bound, and may not be. */
export const maxCauseChars = 2_000;

interface Cause {
  log: RecurringFailureLog;
  lastAt: number;
}

/** The failures of many keys, logged once per cause and quiet period. */
export class FailureCauses {
  readonly #logger: Logger;
  readonly #options: FailureCausesOptions;
  readonly #causes = new Map<string, Cause>();
  readonly #overflow: RecurringFailureLog;

  constructor(logger: Logger, options: FailureCausesOptions) {
    this.#logger = logger;
    this.#options = options;
    this.#overflow = this.#log();
  }

  /** One more failure of `name`; `fields` go on its line. */
  failed(err: unknown, name: string, fields: Record<string, unknown> = {}): void {
    const cause = causeOf(err, name);
    const now = this.#options.now();
    let entry = this.#causes.get(cause);
    if (!entry) {
      const max = this.#options.maxCauses ?? 32;
      if (this.#causes.size >= max) this.#forgetQuiet(now);
      if (this.#causes.size >= max) {
        // Its own summary, so that the many causes are one line per quiet period; one example named.
        this.#overflow.failed(`failures of more than ${max} different causes`, {
          ...fields,
          example: cause,
        });
        return;
      }
      entry = { log: this.#log(), lastAt: now };
      this.#causes.set(cause, entry);
    }
    entry.lastAt = now;
    // The cause as the error: a string summarises as itself, so every key's failure of this cause
    // compares equal, whichever key it names.
    entry.log.failed(cause, fields);
  }

  /** Causes remembered now. */
  get size(): number {
    return this.#causes.size;
  }

  /** Drops the causes that have not failed for a quiet period: their next failure is written anyway. */
  #forgetQuiet(now: number): void {
    const quietMs = this.#options.quietMs ?? 600_000;
    for (const [cause, entry] of this.#causes) {
      if (now - entry.lastAt >= quietMs) this.#causes.delete(cause);
    }
  }

  #log(): RecurringFailureLog {
    const { message, quietMs, now } = this.#options;
    return new RecurringFailureLog(this.#logger, {
      message,
      now,
      ...(quietMs === undefined ? {} : { quietMs }),
    });
  }
}

/**
 * The error's summary with `name` (a node's, a CSR's) replaced by `<item>` wherever it stands as a
 * whole name (not inside a longer one), cut to {@link maxCauseChars}.
 */
export function causeOf(err: unknown, name: string): string {
  const summary = withoutName(describeError(err), name);
  return summary.length > maxCauseChars ? `${summary.slice(0, maxCauseChars)}…` : summary;
}

/** Characters a Kubernetes name is made of: a match next to one of them is part of another name. */
const nameChar = /[A-Za-z0-9_.-]/;

function withoutName(text: string, name: string): string {
  if (name.length === 0) return text;
  let out = '';
  let from = 0;
  let at = text.indexOf(name);
  while (at !== -1) {
    const end = at + name.length;
    const before = at > 0 ? text[at - 1] : undefined;
    const after = text[end];
    if ((before === undefined || !nameChar.test(before)) && (after === undefined || !nameChar.test(after))) {
      out += `${text.slice(from, at)}<item>`;
      from = end;
      at = text.indexOf(name, end);
    } else {
      at = text.indexOf(name, at + 1);
    }
  }
  return out + text.slice(from);
}
