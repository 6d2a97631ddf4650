/**
 * Writes the node's credentials so that a crash never leaves a half-written file: each file is
 * written beside its target, flushed, then renamed over it (atomic on POSIX file systems). Keys are
 * created 0600 from the first byte, never widened later.
 */
import { randomBytes } from 'node:crypto';
import { open, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { ConfigError } from '../errors.ts';
import { makeDirectory } from '../make-directory.ts';

/** The files `join` writes into its directory. */
export const nodeFileNames = {
  clientCertificate: 'kubelet-client.crt',
  clientKey: 'kubelet-client.key',
  serverCertificate: 'kubelet-server.crt',
  serverKey: 'kubelet-server.key',
  caBundle: 'ca.crt',
  kubeconfig: 'kubelet.kubeconfig',
} as const;

/** One of the files `join` writes. */
export type NodeFile = keyof typeof nodeFileNames;

/** Writes `data` to `path` atomically with `mode`. */
export async function writeFileAtomic(path: string, data: string, mode: number): Promise<void> {
  const temporary = `${path}.${randomBytes(6).toString('hex')}.tmp`;
  try {
    const handle = await open(temporary, 'wx', mode);
    try {
      await handle.writeFile(data);
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(temporary, path);
  } catch (err) {
    await rm(temporary, { force: true });
    throw new ConfigError(`cannot write ${path}: ${(err as Error).message}; pass a writable --dir`, {
      cause: err,
    });
  }
}

/** Creates the credentials directory (0700) if it does not exist. */
export async function ensureDirectory(dir: string): Promise<void> {
  try {
    await makeDirectory(dir, 0o700);
  } catch (err) {
    throw new ConfigError(`cannot create ${dir}: ${(err as Error).message}; pass a writable --dir`, {
      cause: err,
    });
  }
}

/** The path of one of the node files in `dir`. */
export function nodeFilePath(dir: string, file: NodeFile): string {
  return join(dir, nodeFileNames[file]);
}
