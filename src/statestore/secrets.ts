/**
 * kops' secret store as kops-controller reads it for a node: `<secretStore>/<id>` holds the JSON of
 * kops' `fi.Secret` (`{"Data": "<base64>"}`, written by `kops create secret`). A node that asks for
 * its configuration (`includeNodeConfig`) gets the secrets of {@link nodeSecretIds} that exist, and
 * no other: kops-controller hands out only these, whatever else the store holds.
 */
import { InvalidInputError, NotFoundError } from '../errors.ts';
import type { Vfs } from './types.ts';

/** The secrets kops-controller gives nodes (`getNodeConfig`): the container registry credentials. */
export const nodeSecretIds = ['dockerconfig'] as const;

/**
 * One secret's data, or undefined when it does not exist or holds none (kops: skipped). A secret that
 * is not kops' JSON is an InvalidInputError; a store that fails throws its own (transient) error.
 */
export async function findSecret(store: Vfs, id: string): Promise<Buffer | undefined> {
  let text: string;
  try {
    text = (await store.read(id)).data.toString('utf8');
  } catch (err) {
    if (err instanceof NotFoundError) return undefined;
    throw err;
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw new InvalidInputError(`secret ${id} in ${store.url} is not JSON: ${(err as Error).message}`);
  }
  // Go's decoder matches the field name without regard to case.
  const data =
    parsed !== null && typeof parsed === 'object'
      ? Object.entries(parsed).find(([key]) => key.toLowerCase() === 'data')?.[1]
      : undefined;
  if (data === undefined || data === null) return undefined;
  if (typeof data !== 'string' || !/^[A-Za-z0-9+/]*={0,2}$/.test(data)) {
    throw new InvalidInputError(`secret ${id} in ${store.url}: Data must be base64`);
  }
  return Buffer.from(data, 'base64');
}

/**
 * Reads the node secrets from `store`: id to base64 of the data, as kops' JSON answer carries a
 * `map[string][]byte`. Empty when the store holds none of them.
 */
export function nodeSecretsReader(store: Vfs): () => Promise<Record<string, string>> {
  return async () => {
    const secrets: Record<string, string> = {};
    for (const id of nodeSecretIds) {
      const data = await findSecret(store, id);
      if (data) secrets[id] = data.toString('base64');
    }
    return secrets;
  };
}
