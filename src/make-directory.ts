/**
 * Creating a directory and its missing parents. Node's `mkdir(dir, { recursive: true })` never
 * returns for a path the kernel refuses with ENOENT although its parent exists (any new name under
 * `/proc` or `/sys`): it creates the parent, which exists, and tries the child again, forever. Here a
 * second ENOENT after the parent was made is the answer.
 */
import { mkdir, stat } from 'node:fs/promises';
import { dirname } from 'node:path';

/** mkdir that counts an existing directory as success. */
async function mkdirOnce(dir: string, mode: number | undefined): Promise<void> {
  try {
    await mkdir(dir, mode === undefined ? {} : { mode });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST' || !(await stat(dir)).isDirectory()) throw err;
  }
}

/** Creates `dir` and any missing parents (each with `mode`); fails with the system error, never hangs. */
export async function makeDirectory(dir: string, mode?: number): Promise<void> {
  try {
    await mkdirOnce(dir, mode);
  } catch (err) {
    const parent = dirname(dir);
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT' || parent === dir) throw err;
    await makeDirectory(parent, mode);
    await mkdirOnce(dir, mode);
  }
}
