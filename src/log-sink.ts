/**
 * Where the logger writes standard error: at once when the reader keeps up, and never by waiting for
 * it. A container runtime's log pipe that is not read (its shipper stalled, a slow disk under it)
 * must not stop the event loop, and with it requests, lease renewals and probes: synchronous writes
 * did, for as long as the reader paused (tmp/volume.md, finding 6).
 *
 * So the lines a full pipe does not take wait here, up to {@link maxBufferedLogBytes}, and are
 * written as it drains; lines past that are dropped and counted ({@link LogSink.dropped}), and one
 * line says how many once the pipe has drained. At exit, what still waits is written out
 * synchronously for at most {@link exitFlushMs}, the last word of the process
 * ({@link LogSink.finalLine}) included: one wait, and that line comes last.
 *
 * Each write hands the pipe whole lines of at most {@link pipeAtomicBytes} in all: other processes
 * write to the same pipe (the bootstrap server's workers inherit standard error), and the kernel
 * takes such a write whole or not at all, never the start of a line with the rest left for later,
 * when another process's line could land in between.
 *
 * Why not sonic-boom's asynchronous mode: it writes on libuv's thread pool, and a write blocked
 * there holds the process at exit until the reader reads again (the pipe is not always
 * non-blocking, below); its exit flush also skips a write in flight. Here every write is a
 * non-blocking one from the main thread, so nothing is ever in flight.
 */
import { fstatSync, writevSync } from 'node:fs';

/** The most bytes of lines held for a reader that does not keep up: about 30 s of a busy server's log. */
export const maxBufferedLogBytes = 4 * 1024 * 1024;

/** How long an exit may wait for a stalled reader to take the lines still held; what it has not taken by then is lost. */
export const exitFlushMs = 2_000;

/** The first wait before writing again to a full pipe; it doubles up to {@link maxRetryMs}. */
const firstRetryMs = 10;
const maxRetryMs = 100;
/** How often an exit flush tries again a pipe that takes nothing. */
const flushPollMs = 10;
/** The most lines handed to one `writev`. */
const maxBuffersPerWrite = 64;
/**
 * PIPE_BUF: a non-blocking write of at most this many bytes to a pipe is taken whole or refused
 * (`EAGAIN`), never cut (POSIX; Linux's pipe page). Only a single line longer than this can be cut.
 */
export const pipeAtomicBytes = 4096;

/** Where a sink writes, and its clock: standard error, or a test's. */
export interface SinkOutput {
  /**
   * Writes what the destination takes now of `buffers`, in order; the bytes written. Throws the
   * system error, `EAGAIN` when it takes nothing now.
   */
  writev(buffers: Buffer[]): number;
  /** Calls `retry` after `ms`, without keeping the process alive for it. */
  later(retry: () => void, ms: number): void;
  /** Blocks the thread for `ms`: only a flush (at exit) waits. */
  sleep(ms: number): void;
  /** Milliseconds, monotonic. */
  now(): number;
}

export interface LogSinkOptions {
  /** Default {@link maxBufferedLogBytes}. */
  maxBufferedBytes?: number;
}

/** Errors after which the destination may take the line later. */
function isBusy(err: unknown): boolean {
  const { code } = (err ?? {}) as { code?: unknown };
  return code === 'EAGAIN' || code === 'EWOULDBLOCK' || code === 'EINTR';
}

/** A logger's destination (pino calls `write` with each finished line). */
export class LogSink {
  readonly #out: SinkOutput;
  readonly #maxBytes: number;
  /** Lines, or the rest of one, the destination has not taken yet, oldest first. */
  #queue: Buffer[] = [];
  #queuedBytes = 0;
  #retryPending = false;
  #retryMs = firstRetryMs;
  #dropped = 0;
  /** Dropped since the last line that said so. */
  #unreported = 0;
  #report: ((dropped: number) => void) | undefined;
  /** The destination refused a write for good (EPIPE: nobody reads; EBADF: closed): lines go nowhere. */
  #gone = false;
  /** Set once the process exits: lines logged later are written at once, until then. */
  #exitDeadline: number | undefined;
  /** The process's last line ({@link finalLine}), held until everything before it is written. */
  #final: Buffer | undefined;
  /** Whether the last line has gone to the queue: no drop report may follow it. */
  #finalQueued = false;
  /** Set while the drops are reported before the last line: that report is kept past the bound. */
  #keeping = false;

  constructor(out: SinkOutput, options: LogSinkOptions = {}) {
    this.#out = out;
    this.#maxBytes = options.maxBufferedBytes ?? maxBufferedLogBytes;
  }

  /** Lines dropped since the process started: the buffer was full, or the destination gone. */
  get dropped(): number {
    return this.#dropped;
  }

  /** Bytes waiting for the destination. */
  get buffered(): number {
    return this.#queuedBytes;
  }

  /** How a drop is reported once the destination has taken everything held (a log line, written here). */
  reportDropsWith(report: (dropped: number) => void): void {
    this.#report = report;
  }

  write(line: string): void {
    this.#add(Buffer.from(line), this.#keeping);
  }

  /**
   * The last word of a process that is ending (a failed command's error, a fatal exit's reason):
   * after every line held, the line reporting the drops not reported yet and any line logged later;
   * kept even past the bound, as that report is. It is held until the process exits, and waits for
   * nothing: the exit's flush writes it out with the rest, within the exit's one bound, so it comes
   * last, or not at all when a stalled reader has not taken what came before. Drops after it are counted, not reported (the report would come
   * after it).
   */
  finalLine(line: string): void {
    // The report is written through `write` (a log line): past the bound too, or it would be dropped
    // itself and reported as one more drop, after the last line.
    this.#keeping = true;
    try {
      this.#reportDrops();
    } finally {
      this.#keeping = false;
    }
    this.#final = Buffer.from(line);
    this.#kick();
  }

  #add(bytes: Buffer, keep: boolean): void {
    if (this.#gone || (!keep && this.#queuedBytes + bytes.length > this.#maxBytes)) {
      // The newest line goes: what is kept stays in order, and the report marks the gap.
      this.#dropped++;
      this.#unreported++;
      return;
    }
    this.#queue.push(bytes);
    this.#queuedBytes += bytes.length;
    this.#kick();
  }

  /** Writes what was just added: at once at exit (within its bound), else what the destination takes now. */
  #kick(): void {
    if (this.#exitDeadline !== undefined) {
      this.flushSync(Math.max(0, this.#exitDeadline - this.#out.now()));
    } else if (!this.#writeOut()) {
      // Tried at every line, not only at the retry: a reader that reads is kept up with at the pace
      // lines come (a stalled one costs one refused write a line).
      this.#retryLater();
    }
  }

  /**
   * Writes out everything held, waiting for the destination for at most `timeoutMs` (the thread
   * blocks meanwhile); whether nothing is left. pino calls it with no timeout after each `fatal`
   * record: that waits for nothing, since the exit that follows a fatal record waits, once, for
   * everything held (a wait without a bound would hold the exit for as long as the reader stalls).
   */
  flushSync(timeoutMs = 0): boolean {
    const deadline = this.#out.now() + timeoutMs;
    for (;;) {
      if (this.#writeOut()) return true;
      const left = deadline - this.#out.now();
      if (!(left > 0)) return false;
      this.#out.sleep(Math.min(flushPollMs, left));
    }
  }

  /**
   * The process is exiting: writes out what is held, and what is logged after (by a later `exit`
   * listener), waiting for the destination until `timeoutMs` from now, all of them together.
   */
  flushAtExit(timeoutMs: number): void {
    this.#exitDeadline = this.#out.now() + timeoutMs;
    this.flushSync(timeoutMs);
  }

  /**
   * The next write: the lines at the front whose total is at most {@link pipeAtomicBytes}, or the
   * first alone when it is longer (such a line was never written whole).
   */
  #nextWrite(): Buffer[] {
    const first = this.#queue[0] as Buffer;
    let bytes = first.length;
    let count = 1;
    while (count < this.#queue.length && count < maxBuffersPerWrite) {
      const next = (this.#queue[count] as Buffer).length;
      if (bytes + next > pipeAtomicBytes) break;
      bytes += next;
      count++;
    }
    return this.#queue.slice(0, count);
  }

  /** Writes what the destination takes now; whether nothing is left. */
  #writeOut(): boolean {
    for (;;) {
      if (this.#queue.length === 0) {
        // The last line goes once everything before it has, and only at exit: a line logged after
        // it was given (during main's exit grace, a component stopping) still comes before it.
        if (!this.#final || this.#exitDeadline === undefined) break;
        this.#queue.push(this.#final);
        this.#queuedBytes += this.#final.length;
        this.#final = undefined;
        this.#finalQueued = true;
      }
      let written: number;
      try {
        written = this.#out.writev(this.#nextWrite());
      } catch (err) {
        if (isBusy(err)) return false;
        this.#dropped += this.#queue.length;
        this.#queue = [];
        this.#queuedBytes = 0;
        this.#gone = true;
        return true;
      }
      if (written === 0) return false;
      this.#taken(written);
    }
    this.#reportDrops();
    return true;
  }

  /** Reports the lines dropped since the last report, if any, and if anyone could read it. */
  #reportDrops(): void {
    if (this.#unreported === 0 || this.#gone || this.#finalQueued || this.#final) return;
    const dropped = this.#unreported;
    this.#unreported = 0;
    this.#report?.(dropped);
  }

  /** The destination took `bytes` from the front of the queue. */
  #taken(bytes: number): void {
    this.#queuedBytes -= bytes;
    let left = bytes;
    while (left > 0) {
      const first = this.#queue[0] as Buffer;
      if (first.length > left) {
        this.#queue[0] = first.subarray(left);
        return;
      }
      left -= first.length;
      this.#queue.shift();
    }
  }

  #retryLater(): void {
    if (this.#retryPending) return;
    this.#retryPending = true;
    this.#out.later(() => {
      this.#retryPending = false;
      if (this.#writeOut()) {
        this.#retryMs = firstRetryMs;
      } else {
        this.#retryMs = Math.min(maxRetryMs, this.#retryMs * 2);
        this.#retryLater();
      }
    }, this.#retryMs);
  }
}

/**
 * Makes writes to standard error return `EAGAIN` rather than wait, when it is a pipe or a socket.
 * Node's own `process.stderr` sets that once, but any process started with an inherited standard
 * error (the bootstrap server's forked workers, `/bin/sh`) sets the pipe, which it shares, back to
 * blocking writes (libuv does for a child's standard streams): so it is set again before each
 * write (a quarter of a microsecond). A terminal is left as Node keeps it (blocking: another program
 * shares it), and a file never waits for a reader.
 */
function nonBlockingStderr(): () => void {
  let pipe = false;
  try {
    const stat = fstatSync(2);
    pipe = stat.isFIFO() || stat.isSocket();
  } catch {
    // Closed: each write fails, and the sink counts its lines as dropped.
  }
  if (!pipe) return () => {};
  const handle = (process.stderr as unknown as { _handle?: { setBlocking?(blocking: boolean): number } })
    ._handle;
  return () => void handle?.setBlocking?.(false);
}

const sleepCell = new Int32Array(new SharedArrayBuffer(4));

/** Standard error as a sink's output. */
function stderrOutput(): SinkOutput {
  const nonBlocking = nonBlockingStderr();
  return {
    writev: (buffers) => {
      nonBlocking();
      return writevSync(2, buffers);
    },
    later: (retry, ms) => void setTimeout(retry, ms).unref(),
    sleep: (ms) => void Atomics.wait(sleepCell, 0, 0, ms),
    now: () => performance.now(),
  };
}

let processSink: LogSink | undefined;

/**
 * The process's one sink on standard error, shared by every logger that writes there (two would
 * interleave the pieces of lines a full pipe took in parts). Created with the first, together with
 * the exit handler that writes out what it holds: `process.exit` anywhere, an uncaught error, the
 * end of the event loop.
 */
export function stderrSink(): LogSink {
  if (!processSink) {
    const sink = new LogSink(stderrOutput());
    process.on('exit', () => sink.flushAtExit(exitFlushMs));
    processSink = sink;
  }
  return processSink;
}

/** Lines the process's sink dropped (0 when nothing has logged to standard error). */
export function stderrLinesDropped(): number {
  return processSink?.dropped ?? 0;
}
