/** Local input files named on the command line (CSRs, PEM bundles, bootstrap request bodies). */
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
  let size: number;
  try {
    size = (await stat(path)).size;
  } catch (err) {
    // The reason is the whole story; the system error's own text would only repeat it.
    throw new NotFoundError(`cannot read ${what} ${path}: ${fileErrorReason(err)}`);
  }
  if (size > limit) throw tooLarge(`${what} ${path}: ${size} bytes exceeds the ${limit}-byte limit`);
  return readFile(path);
}
