/**
 * Kubernetes label syntax, checked when the state store is read so that a bad label in an instance
 * group is reported against the file that holds it, not as a failed node patch later. It lives beside
 * the DNS-name rules rather than in src/nodelabels, which reads the state store's types: the two
 * folders then depend in one direction only.
 */
import { isDnsSubdomain } from './dns-name.ts';

const namePart = /^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;

/** Why a label key is invalid (`prefix/name`, name ≤ 63 chars, prefix a DNS subdomain), or undefined. */
export function labelKeyProblem(key: string): string | undefined {
  const slash = key.lastIndexOf('/');
  const prefix = slash < 0 ? undefined : key.slice(0, slash);
  const name = slash < 0 ? key : key.slice(slash + 1);
  if (prefix !== undefined && !isDnsSubdomain(prefix)) {
    return `label key "${key}": the prefix must be a lower-case DNS subdomain of at most 253 characters`;
  }
  if (name.length === 0 || name.length > 63 || !namePart.test(name)) {
    return (
      `label key "${key}": the name must be 1-63 characters of letters, digits, "-", "_" or ".", ` +
      'starting and ending with a letter or digit'
    );
  }
  return undefined;
}

/** Why a label value is invalid (empty, or ≤ 63 chars of the name alphabet), or undefined. */
export function labelValueProblem(value: string): string | undefined {
  if (value === '' || (value.length <= 63 && namePart.test(value))) return undefined;
  return (
    `label value "${value}": must be empty or 1-63 characters of letters, digits, "-", "_" or ".", ` +
    'starting and ending with a letter or digit'
  );
}
