/**
 * How a joining node proves who it is: the `Authorization` header of docs/bootstrap-api.md, made
 * fresh for each attempt because cloud proofs bind to the exact body and expire.
 */
import { fetchMetadataText } from '../cloud/metadata-service.ts';
import { InvalidInputError, UnavailableError } from '../errors.ts';

/** Makes the `Authorization` header value for one request body; undefined sends no proof. */
export type ProofProvider = (body: Buffer, signal?: AbortSignal) => Promise<string | undefined>;

const tokenPattern = /^[a-z0-9]{6}\.[a-z0-9]{16}$/;

/**
 * Checks a kubeadm-format bootstrap token (`abcdef.0123456789abcdef`) without echoing it; `source`
 * (the flag or variable it came from, as `--token`) begins the message when given.
 */
export function validateBootstrapToken(token: string, source?: string): string {
  if (!tokenPattern.test(token)) {
    throw new InvalidInputError(
      `${source ? `${source}: ` : ''}the bootstrap token is not in the kubeadm format <6 lowercase letters or digits>.<16 lowercase letters or digits>`,
    );
  }
  return token;
}

/** The argument parser of a `--token` flag: a malformed token is refused naming the flag (exit 65). */
export function bootstrapTokenFlag(flag: string): (value: string) => string {
  return (value) => validateBootstrapToken(value, flag);
}

/** A bootstrap token sent as `Authorization: Bearer <id>.<secret>`. */
export function tokenProof(token: string): ProofProvider {
  const header = `Bearer ${validateBootstrapToken(token)}`;
  return async () => header;
}

/** No proof: only the `queue` and `insecure-always-approve` policies can act on the request. */
export const noProof: ProofProvider = async () => undefined;

/** The GCE metadata server's identity-token path (override for the simulator or a proxy). */
export const defaultGceIdentityUrl =
  'http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/default/identity';

/**
 * A Google instance identity token (`format=full`, audience = the bootstrap server URL) from the
 * metadata server, sent as `Authorization: x-gce-identity <jwt>`.
 */
export function gceIdentityProof(options: {
  audience: string;
  identityUrl?: string;
  fetch?: typeof globalThis.fetch;
  /** The deadline of one read of the token (default 10 s). */
  timeoutMs?: number;
}): ProofProvider {
  return async (_body, signal) => {
    // Query parameters already in the URL (the simulator's `instance=`) are kept.
    const url = new URL(options.identityUrl ?? defaultGceIdentityUrl);
    url.searchParams.set('audience', options.audience);
    url.searchParams.set('format', 'full');
    // A deadline per read, no redirect followed, a body of 64 KiB at most (a token is 1–2 KiB).
    const text = (
      await fetchMetadataText({
        url,
        service: 'the GCE metadata server',
        what: 'the identity token',
        headers: { 'Metadata-Flavor': 'Google' },
        maxBytes: 64 * 1024,
        ...(options.fetch ? { fetch: options.fetch } : {}),
        ...(options.timeoutMs ? { timeoutMs: options.timeoutMs } : {}),
        ...(signal ? { signal } : {}),
      })
    ).trim();
    if (!/^[\w-]+\.[\w-]+\.[\w-]+$/.test(text)) {
      throw new UnavailableError('the GCE metadata server returned something that is not a JWT');
    }
    return `x-gce-identity ${text}`;
  };
}
