/**
 * The PKI folder: where a CA and the certificates it issued live in a local folder or a state store.
 * The CA is kept either as PEM files in kops-controller's `caBasePath` layout (`<name>.crt` holding
 * the bundle, `<name>.key`, `keypair-ids.yaml`) or as a kops keyset (`pki/private/<name>/keyset.yaml`).
 * Issued material goes to `nodes/<node>/<profile>.{crt,key}`.
 */
import { fileURLToPath } from 'node:url';
import { parse, stringify } from 'yaml';
import { ConflictError, InvalidInputError, NotFoundError } from '../errors.ts';
import type { Vfs } from '../statestore/types.ts';
import { bundlePem, type CertificateAuthority, caFromPem } from './ca.ts';
import { parsePrivateKeyPem, privateKeyPem } from './keys.ts';
import { caFromKeyset, keysetOf, keysetPath } from './keyset.ts';

/** Modes for what the folder holds: secrets owner-only, public material world-readable. */
export const privateFileMode = 0o600;
export const publicFileMode = 0o644;

/** How a CA is stored. */
export type CaLayout = 'pem' | 'keyset';

/** Paths of the PEM layout, relative to the folder. */
export function caPemPaths(name: string): { certificate: string; key: string } {
  return { certificate: `${name}.crt`, key: `${name}.key` };
}

/** kops-controller's map of CA name to the signer's keypair id. */
export const keypairIdsPath = 'keypair-ids.yaml';

/** Path of an issued file for a node. */
export function nodeFilePath(node: string, file: string): string {
  return `nodes/${node}/${file}`;
}

/** Where a folder path is, for people and scripts: a file path for local folders, else a URL. */
export function locationOf(vfs: Vfs, path: string): string {
  return vfs.url.startsWith('file://') ? `${fileURLToPath(vfs.url)}/${path}` : `${vfs.url}/${path}`;
}

/** Reads a text object, or undefined when it does not exist. */
export async function readText(vfs: Vfs, path: string): Promise<string | undefined> {
  try {
    return (await vfs.read(path)).data.toString('utf8');
  } catch (err) {
    if (err instanceof NotFoundError) return undefined;
    throw err;
  }
}

/** Loads the CA named `name`: the PEM layout if present, else the kops keyset. */
export async function loadCa(vfs: Vfs, name: string, now = new Date()): Promise<CertificateAuthority> {
  const paths = caPemPaths(name);
  const keyPem = await readText(vfs, paths.key);
  if (keyPem !== undefined) {
    const certificates = await readText(vfs, paths.certificate);
    if (certificates === undefined) {
      throw new NotFoundError(`${locationOf(vfs, paths.certificate)} is missing although the CA key exists`);
    }
    const ids = parse((await readText(vfs, keypairIdsPath)) ?? '{}') as Record<string, unknown> | null;
    const signerKeypairId = typeof ids?.[name] === 'string' ? ids[name] : undefined;
    return caFromPem(certificates, parsePrivateKeyPem(keyPem, locationOf(vfs, paths.key)), {
      name,
      now,
      ...(signerKeypairId ? { signerKeypairId } : {}),
    });
  }
  const keyset = await readText(vfs, keysetPath(name));
  if (keyset !== undefined) return caFromKeyset(keyset, { now, source: locationOf(vfs, keysetPath(name)) });
  throw new NotFoundError(
    `no CA "${name}" in ${vfs.url}: expected ${paths.certificate} and ${paths.key}, or ${keysetPath(name)}; run "kops-controller pki init" first`,
  );
}

/** How the folder stores the CA named `name`, or undefined if it holds none. */
export async function caLayoutOf(vfs: Vfs, name: string): Promise<CaLayout | undefined> {
  if ((await vfs.stat(caPemPaths(name).key)) !== undefined) return 'pem';
  if ((await vfs.stat(keysetPath(name))) !== undefined) return 'keyset';
  return undefined;
}

/**
 * Writes a CA in a layout, replacing what is there. In the PEM layout the bundle goes first and the
 * key last: interrupted half way, the old key still finds its certificate in the bundle, and a new
 * CA without its key does not count as existing.
 */
export async function saveCa(
  vfs: Vfs,
  ca: CertificateAuthority,
  layout: CaLayout,
): Promise<{ certificate: string; key: string }> {
  if (layout === 'keyset') {
    await vfs.write(keysetPath(ca.name), keysetOf(ca), { mode: privateFileMode });
    const location = locationOf(vfs, keysetPath(ca.name));
    return { certificate: location, key: location };
  }
  if (layout !== 'pem') throw new InvalidInputError(`unknown CA layout "${layout}": use pem or keyset`);
  const paths = caPemPaths(ca.name);
  const ids = parse((await readText(vfs, keypairIdsPath)) ?? '{}') ?? {};
  await vfs.write(paths.certificate, bundlePem(ca), { mode: publicFileMode });
  await vfs.write(keypairIdsPath, stringify({ ...ids, [ca.name]: ca.signer.certificate.keypairId }), {
    mode: publicFileMode,
  });
  await vfs.write(paths.key, privateKeyPem(ca.signer.key), { mode: privateFileMode });
  return { certificate: locationOf(vfs, paths.certificate), key: locationOf(vfs, paths.key) };
}

/** Saves a new CA; refuses to replace an existing one, whose loss would orphan every node. */
export async function saveNewCa(
  vfs: Vfs,
  ca: CertificateAuthority,
  layout: CaLayout,
): Promise<{ certificate: string; key: string }> {
  if ((await caLayoutOf(vfs, ca.name)) !== undefined) {
    throw new ConflictError(
      `${vfs.url} already holds a CA "${ca.name}"; use another --dir or --ca-name, or remove it deliberately`,
    );
  }
  return saveCa(vfs, ca, layout);
}
