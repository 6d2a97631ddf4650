/**
 * The DNS-1123 subdomain rule Kubernetes applies to node names and label-key prefixes: lower-case
 * letters, digits, "-" and ".", each dot-separated part starting and ending with a letter or digit,
 * at most 253 characters in all.
 */
const dns1123Subdomain = /^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/** Whether `name` is a lower-case RFC 1123 subdomain of at most 253 characters. */
export function isDnsSubdomain(name: string): boolean {
  return dns1123Subdomain.test(name);
}

/** Whether `name` is a DNS-1123 subdomain whose every label also fits DNS (at most 63 characters). */
export function isDnsName(name: string): boolean {
  return isDnsSubdomain(name) && name.split('.').every((label) => label.length <= 63);
}
