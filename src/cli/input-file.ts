/** Local input files named on the command line (CSRs, PEM bundles, bootstrap request bodies). */
import type { Stats } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import { fileErrorReason, InvalidInputError, type KopsError, NotFoundError } from '../errors.ts';

/**
 * Reads a local input file, refusing it before reading when it is larger than `limit`; `what` names
 * it in errors ("--request", "CSR file"). An oversized file is an input error unless `tooLarge` makes
 * another one (a CSR that is too large is a rejected request, like any other bad CSR).
 */
export async function readInputFile(
  path: string,
  limit: number,
  what: string,
  tooLarge: (message: string) => KopsError = (message) => new InvalidInputError(message),
): Promise<Buffer> {
  // The reason is the whole story; the system error's own text would only repeat it.
  const unreadable = (reason: string) => new NotFoundError(`cannot read ${what} ${path}: ${reason}`);
  let info: Stats;
  try {
    info = await stat(path);
  } catch (err) {
    throw unreadable(fileErrorReason(err));
  }
  // A directory stats fine and fails only when read; say so before reading (a pipe or device is read).
  if (info.isDirectory()) throw unreadable('is a directory');
  if (info.size > limit)
    throw tooLarge(`${what} ${path}: ${info.size} bytes exceeds the ${limit}-byte limit`);
  try {
    return await readFile(path);
  } catch (err) {
    throw unreadable(fileErrorReason(err));
  }
}
