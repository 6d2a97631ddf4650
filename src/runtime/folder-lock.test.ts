import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { ConflictError } from '../errors.ts';
import { holderIsAlive, lockFileName, lockFolder, processStartMs } from './folder-lock.ts';

/** A real process that lives until killed. */
function sleeper(): ChildProcess {
  return spawn('sleep', ['60'], { stdio: 'ignore' });
}

/** The pid of a real process that has exited. */
async function deadPid(): Promise<number> {
  const child = spawn('true', { stdio: 'ignore' });
  await new Promise((resolve) => child.once('exit', resolve));
  return child.pid as number;
}

describe('folder lock', () => {
  let root: string;
  let live: ChildProcess;
  let liveStartedAt: string;
  before(async () => {
    root = await mkdtemp(join(tmpdir(), 'folder-lock-'));
    liveStartedAt = new Date().toISOString();
    live = sleeper();
  });
  after(async () => {
    live.kill();
    await rm(root, { recursive: true, force: true });
  });

  const lockOf = (holder: unknown) => JSON.stringify(holder);

  test('a folder held by a live process is refused with its pid and start; its lock is left alone', async () => {
    const dir = join(root, 'held');
    const first = await lockFolder(dir, 'stop it');
    const holder = await readFile(first.path, 'utf8');
    assert.deepEqual(Object.keys(JSON.parse(holder)), ['pid', 'startedAt']);
    await assert.rejects(lockFolder(dir, 'stop it, or use another folder'), (err: unknown) => {
      assert.ok(err instanceof ConflictError);
      const { startedAt } = JSON.parse(holder) as { startedAt: string };
      assert.equal(
        err.message,
        `${dir} is in use by process ${process.pid}, started ${startedAt}; stop it, or use another folder`,
      );
      return true;
    });
    assert.equal(await readFile(first.path, 'utf8'), holder);
    await first.release();
    await (await lockFolder(dir, 'stop it')).release();
  });

  test('another live process holding the lock is named too', async () => {
    const dir = join(root, 'other');
    await lockFolder(dir, 'x').then((lock) => lock.release());
    await writeFile(join(dir, lockFileName), lockOf({ pid: live.pid, startedAt: liveStartedAt }));
    await assert.rejects(lockFolder(dir, 'x'), new RegExp(`in use by process ${live.pid}, started`));
  });

  test('the lock of a process that is gone, or a file that is not a lock, is taken over', async () => {
    const stale = [
      lockOf({ pid: await deadPid(), startedAt: new Date().toISOString() }),
      // A pid in use again, by a process that started after the lock was written: not the holder.
      lockOf({ pid: live.pid, startedAt: '2020-01-01T00:00:00.000Z' }),
      'garbage',
    ];
    for (const [i, text] of stale.entries()) {
      const dir = join(root, `stale-${i}`);
      await lockFolder(dir, 'x').then((lock) => lock.release());
      await writeFile(join(dir, lockFileName), text);
      const lock = await lockFolder(dir, 'x');
      assert.equal(JSON.parse(await readFile(lock.path, 'utf8')).pid, process.pid, text);
      await lock.release();
      await assert.rejects(readFile(lock.path), { code: 'ENOENT' });
    }
  });

  test('of two lockers at once, exactly one wins; release leaves a lock that is not its own', async () => {
    const dir = join(root, 'race');
    const results = await Promise.allSettled([lockFolder(dir, 'x'), lockFolder(dir, 'x')]);
    assert.deepEqual(results.map((r) => r.status).sort(), ['fulfilled', 'rejected']);
    const won = results.find((r) => r.status === 'fulfilled');
    const lock = (won as PromiseFulfilledResult<Awaited<ReturnType<typeof lockFolder>>>).value;
    const other = lockOf({ pid: live.pid, startedAt: liveStartedAt });
    await writeFile(lock.path, other);
    await lock.release();
    assert.equal(await readFile(lock.path, 'utf8'), other);
  });

  test('liveness: this process and a sleeping child are alive, an exited one is not', async () => {
    assert.equal(holderIsAlive({ pid: process.pid, startedAt: new Date().toISOString() }), true);
    assert.equal(holderIsAlive({ pid: live.pid as number, startedAt: liveStartedAt }), true);
    assert.equal(holderIsAlive({ pid: await deadPid(), startedAt: new Date().toISOString() }), false);
    const started = processStartMs(process.pid);
    assert.ok(started !== undefined && Math.abs(started - performance.timeOrigin) < 2_000, `${started}`);
  });
});
