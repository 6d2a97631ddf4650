/**
 * The bootstrap token as it is written and presented: `<id>.<secret>`, six then sixteen characters
 * of `[a-z0-9]` (kubeadm's format). The node carries it (to check cluster-info's signature, to
 * authenticate a join); the server stores and judges it (src/bootstrap/tokens.ts). Pure.
 */

const tokenIdPattern = /^[a-z0-9]{6}$/;
const tokenSecretPattern = /^[a-z0-9]{16}$/;
const tokenPattern = /^([a-z0-9]{6})\.([a-z0-9]{16})$/;

/** Splits `<id>.<secret>`; undefined when the string is not a bootstrap token. */
export function parseToken(token: string): { id: string; secret: string } | undefined {
  const match = tokenPattern.exec(token);
  return match ? { id: match[1] as string, secret: match[2] as string } : undefined;
}

/** Whether a string is a valid token id (6 characters of `[a-z0-9]`). */
export function isTokenId(id: string): boolean {
  return tokenIdPattern.test(id);
}

/** Whether a string is a valid token secret (16 characters of `[a-z0-9]`). */
export function isTokenSecret(secret: string): boolean {
  return tokenSecretPattern.test(secret);
}
