/**
 * kops keysets: the `Keyset` objects kops keeps at `pki/private/<name>/keyset.yaml` in the state
 * store (`kops.k8s.io/v1alpha2`; `spec.keys[]` with base64 PEM `publicMaterial` / `privateMaterial`,
 * `spec.primaryId` naming the signer). Reading one gives a CA whose bundle holds every trusted item;
 * writing one records the bundle with the signer's key as primary.
 */
import { parse, stringify } from 'yaml';
import { z } from 'zod';
import { InvalidInputError } from '../errors.ts';
import { type CaCertificate, type CertificateAuthority, caCertificateOf, signerOf } from './ca.ts';
import { parsePrivateKeyPem, privateKeyPem } from './keys.ts';

/** Where kops keeps a keyset, relative to the state store's cluster folder. */
export function keysetPath(name: string): string {
  return `pki/private/${name}/keyset.yaml`;
}

const base64 = z.string().regex(/^[A-Za-z0-9+/\s]*={0,2}\s*$/, 'expected base64');

const keysetSchema = z.object({
  apiVersion: z.enum(['kops.k8s.io/v1alpha2', 'kops/v1alpha2']),
  kind: z.literal('Keyset'),
  metadata: z.looseObject({ name: z.string().min(1) }),
  spec: z.looseObject({
    type: z.string().optional(),
    primaryId: z.string().min(1),
    keys: z
      .array(
        z.looseObject({
          id: z.string().min(1),
          publicMaterial: base64.optional(),
          privateMaterial: base64.optional(),
          distrustTimestamp: z.string().optional(),
        }),
      )
      .min(1),
  }),
});

/** kops orders keypair ids numerically when both are numbers (newer is larger), else as text. */
export function keypairIdOlder(a: string, b: string): boolean {
  const numeric = (id: string) => /^\d+$/.test(id);
  if (numeric(a) && numeric(b)) return BigInt(a) < BigInt(b);
  if (numeric(a) !== numeric(b)) return !numeric(a);
  return a < b;
}

function decodeMaterial(value: string): string {
  return Buffer.from(value.replace(/\s+/g, ''), 'base64').toString('utf8');
}

/** Loads a CA from keyset YAML: the primary item signs; every trusted item is in the bundle. */
export function caFromKeyset(
  text: string,
  options: { now?: Date; source?: string } = {},
): CertificateAuthority {
  const source = options.source ?? 'keyset';
  let raw: unknown;
  try {
    raw = parse(text);
  } catch (err) {
    throw new InvalidInputError(`${source}: not valid YAML (${(err as Error).message.split('\n')[0]})`, {
      cause: err,
    });
  }
  const result = keysetSchema.safeParse(raw);
  if (!result.success) {
    const issue = result.error.issues[0];
    throw new InvalidInputError(
      `${source}: not a kops Keyset: ${issue?.path.join('.') || '(top level)'}: ${issue?.message}`,
    );
  }
  const { metadata, spec } = result.data;
  const trusted = spec.keys.filter((k) => k.publicMaterial && !k.distrustTimestamp);
  const certificates = trusted.map((k) => caCertificateOf(decodeMaterial(k.publicMaterial as string), k.id));
  const primary = spec.keys.find((k) => k.id === spec.primaryId);
  const primaryCertificate = certificates.find((c) => c.keypairId === spec.primaryId);
  if (!primary?.privateMaterial || !primaryCertificate) {
    throw new InvalidInputError(
      `${source}: primary keypair "${spec.primaryId}" must be present, trusted, and hold both a certificate and a private key`,
    );
  }
  const key = parsePrivateKeyPem(decodeMaterial(primary.privateMaterial), `${source} primary key`);
  const others = certificates
    .filter((c) => c !== primaryCertificate)
    .sort((a, b) => (keypairIdOlder(a.keypairId, b.keypairId) ? 1 : -1));
  return {
    name: metadata.name,
    certificates: [primaryCertificate, ...others],
    signer: signerOf(primaryCertificate, key, options.now),
  };
}

/** Serialises a CA as a kops keyset: items oldest first, the signer's with its private key. */
export function keysetOf(ca: CertificateAuthority): string {
  const ordered = [...ca.certificates].sort((a, b) => (keypairIdOlder(a.keypairId, b.keypairId) ? -1 : 1));
  const encode = (text: string) => Buffer.from(text).toString('base64');
  const item = (c: CaCertificate) => ({
    id: c.keypairId,
    publicMaterial: encode(c.pem),
    ...(c === ca.signer.certificate ? { privateMaterial: encode(privateKeyPem(ca.signer.key)) } : {}),
  });
  return stringify({
    apiVersion: 'kops.k8s.io/v1alpha2',
    kind: 'Keyset',
    metadata: { name: ca.name },
    spec: { keys: ordered.map(item), primaryId: ca.signer.certificate.keypairId, type: 'Keypair' },
  });
}
