/**
 * The simulated Google identity-token issuer: signs RS256 JWTs shaped like the ones the GCE metadata
 * server returns for `instance/service-accounts/default/identity?audience=…&format=full`, and serves
 * the public keys as a JWKS the way `https://www.googleapis.com/oauth2/v3/certs` does. Keys can be
 * rotated (old keys stay published, as Google's do) so verifiers can be tested on unknown `kid`s.
 */
import { createHash, generateKeyPairSync, type KeyObject, sign } from 'node:crypto';

/** The issuer Google writes into instance identity tokens. */
export const googleIssuer = 'https://accounts.google.com';

/** A JSON Web Key as published in a JWKS. */
export interface PublicJwk {
  kty: string;
  kid: string;
  alg: string;
  use: string;
  n: string;
  e: string;
}

/** Encodes a JSON value as a base64url JWT segment. */
function segment(value: unknown): string {
  return Buffer.from(JSON.stringify(value)).toString('base64url');
}

/** Signs a JWT with RS256; exported so tests can forge tokens with keys of their own. */
export function signRs256Jwt(header: Record<string, unknown>, payload: unknown, key: KeyObject): string {
  const input = `${segment({ alg: 'RS256', typ: 'JWT', ...header })}.${segment(payload)}`;
  return `${input}.${sign('sha256', Buffer.from(input), key).toString('base64url')}`;
}

/** Generates an RSA-2048 signing key and its JWK, with a kid derived from the modulus. */
export function generateSigningKey(): { kid: string; privateKey: KeyObject; jwk: PublicJwk } {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const exported = publicKey.export({ format: 'jwk' }) as { n: string; e: string };
  const kid = createHash('sha1').update(exported.n).digest('hex');
  return {
    kid,
    privateKey,
    jwk: { kty: 'RSA', kid, alg: 'RS256', use: 'sig', n: exported.n, e: exported.e },
  };
}

/** What the metadata server knows about the instance asking for a token. */
export interface IdentitySubject {
  projectId: string;
  projectNumber: string;
  zone: string;
  instanceId: string;
  instanceName: string;
  /** Seconds since the epoch. */
  instanceCreationTimestamp: number;
  /** The numeric id of the instance's service account (`sub` and `azp`). */
  serviceAccountId: string;
  serviceAccountEmail: string;
}

/** Options of one token, mirroring the metadata server's query parameters. */
export interface IdentityTokenRequest {
  audience: string;
  /** `full` adds the `google.compute_engine` claims; `standard` (the default) omits them. */
  format?: 'full' | 'standard';
  /** Issue time in seconds since the epoch; defaults to now. */
  issuedAt?: number;
  /** Lifetime in seconds; Google's tokens live one hour. */
  lifetimeSeconds?: number;
}

/** The issuer's key ring and token minting. */
export class IdentityIssuer {
  readonly #keys: Array<ReturnType<typeof generateSigningKey>> = [generateSigningKey()];

  /** The published key set, newest first. */
  jwks(): { keys: PublicJwk[] } {
    return { keys: this.#keys.map((k) => k.jwk) };
  }

  /** Adds a new signing key; tokens are signed with it from now on, older keys stay published. */
  rotate(): string {
    const key = generateSigningKey();
    this.#keys.unshift(key);
    return key.kid;
  }

  /** Signs an identity token for an instance. */
  issue(subject: IdentitySubject, request: IdentityTokenRequest): string {
    const key = this.#keys[0] as ReturnType<typeof generateSigningKey>;
    const iat = request.issuedAt ?? Math.floor(Date.now() / 1000);
    const payload: Record<string, unknown> = {
      iss: googleIssuer,
      aud: request.audience,
      azp: subject.serviceAccountId,
      sub: subject.serviceAccountId,
      email: subject.serviceAccountEmail,
      email_verified: true,
      iat,
      exp: iat + (request.lifetimeSeconds ?? 3600),
    };
    if (request.format === 'full') {
      payload['google'] = {
        compute_engine: {
          instance_creation_timestamp: subject.instanceCreationTimestamp,
          instance_id: subject.instanceId,
          instance_name: subject.instanceName,
          project_id: subject.projectId,
          project_number: Number(subject.projectNumber),
          zone: subject.zone,
        },
      };
    }
    return signRs256Jwt({ kid: key.kid }, payload, key.privateKey);
  }
}
