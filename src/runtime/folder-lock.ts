/**
 * A lock on a folder a process owns, as a file in it that names the holder: its pid and when it
 * started. `dev` takes one on its state directory, so a second `npm start` in the same checkout says
 * who already runs there instead of overwriting that one's files. A lock whose process is gone (it
 * was killed, or the machine restarted) is taken over.
 */
import { readFileSync } from 'node:fs';
import { readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ConfigError, ConflictError, describeError } from '../errors.ts';
import { makeDirectory } from '../make-directory.ts';

/** What the lock file records. */
export interface LockHolder {
  pid: number;
  /** When the holding process started (ISO 8601). */
  startedAt: string;
}

/** A lock held by this process. */
export interface FolderLock {
  path: string;
  /** Removes the lock file, if it is still this process's. */
  release(): Promise<void>;
}

/** The name of the lock file in a locked folder. */
export const lockFileName = 'lock';

/** This process, as a lock file records it. */
function thisProcess(): LockHolder {
  return { pid: process.pid, startedAt: new Date(performance.timeOrigin).toISOString() };
}

function parseHolder(text: string): LockHolder | undefined {
  try {
    const value = JSON.parse(text) as Partial<LockHolder>;
    if (Number.isSafeInteger(value.pid) && typeof value.startedAt === 'string') return value as LockHolder;
  } catch {
    // not a lock this code wrote: stale
  }
  return undefined;
}

/**
 * When process `pid` started, in ms since the epoch, from Linux's /proc; undefined where there is no
 * /proc. /proc counts in clock ticks since boot; USER_HZ, their rate, is 100 on every Linux
 * architecture Node supports.
 */
export function processStartMs(pid: number, proc = '/proc'): number | undefined {
  try {
    const bootSeconds = Number(/^btime (\d+)$/m.exec(readFileSync(`${proc}/stat`, 'utf8'))?.[1]);
    const stat = readFileSync(`${proc}/${pid}/stat`, 'utf8');
    // Fields after the parenthesised command name (which may hold spaces): starttime is the 22nd.
    const ticks = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]);
    return Number.isFinite(bootSeconds) && Number.isFinite(ticks)
      ? bootSeconds * 1000 + ticks * 10
      : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Whether the holder still runs: its pid exists and, where /proc tells, did not start after the
 * holder recorded its own start (which would make it another process that reused the pid).
 */
export function holderIsAlive(holder: LockHolder): boolean {
  try {
    process.kill(holder.pid, 0);
  } catch (err) {
    // EPERM: it exists, as another user's process.
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  const started = processStartMs(holder.pid);
  // /proc's boot time has whole seconds: allow for them.
  return started === undefined || started <= Date.parse(holder.startedAt) + 2_000;
}

/**
 * Locks `dir` (created if missing) for this process, or throws a ConflictError naming the process
 * that holds it and `remedy`.
 */
export async function lockFolder(dir: string, remedy: string): Promise<FolderLock> {
  const path = join(dir, lockFileName);
  const me = `${JSON.stringify(thisProcess())}\n`;
  try {
    await makeDirectory(dir, 0o700);
  } catch (err) {
    throw new ConfigError(`cannot create ${dir}: ${describeError(err)}`, { cause: err });
  }
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      await writeFile(path, me, { flag: 'wx', mode: 0o600 });
      return {
        path,
        async release() {
          const current = await readFile(path, 'utf8').catch(() => undefined);
          if (current === me) await rm(path, { force: true });
        },
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') {
        throw new ConfigError(`cannot create ${path}: ${describeError(err)}`, { cause: err });
      }
    }
    const text = await readFile(path, 'utf8').catch(() => undefined);
    if (text === undefined) continue; // released meanwhile
    const holder = parseHolder(text);
    if (holder && holderIsAlive(holder)) {
      throw new ConflictError(
        `${dir} is in use by process ${holder.pid}, started ${holder.startedAt}; ${remedy}`,
        { details: { ...holder } },
      );
    }
    // Stale. Moved aside first, so that of two processes taking it over only one removes it; one
    // that finds a live lock there instead (the other took over in between) puts it back.
    const aside = `${path}.stale-${process.pid}`;
    try {
      await rename(path, aside);
    } catch {
      continue;
    }
    if ((await readFile(aside, 'utf8').catch(() => undefined)) !== text) await rename(aside, path);
    else await rm(aside, { force: true });
  }
  throw new ConflictError(`${dir} is being locked by another process as well; ${remedy}`);
}
