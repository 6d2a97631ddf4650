/**
 * The settings users of postfinance/kubelet-csr-approver expect, for kubelet serving requests, on top
 * of the cloud check (checks.ts), which stays: a DNS name pattern (its `--provider-regex`), allowed IP
 * ranges (`--provider-ip-prefixes`), a maximum lifetime (`--max-expiration-sec`) and whether names
 * must resolve (the opposite of `--bypass-dns-resolution`). Each, when not set, adds no check: the
 * cloud check alone decides. Where this differs from kubelet-csr-approver, it is stricter on purpose:
 * - the pattern must match the whole name (its Go regexp is unanchored, so `.*\.example\.com` there
 *   also passes `x.example.com.attacker.net`);
 * - a resolver failure other than "no such name" is an outage to retry, never a denial (it denies at
 *   once, so a DNS blip denies every renewal).
 * Pure: the lookups themselves happen in the approver.
 */
import { BlockList, isIP } from 'node:net';
import { InvalidInputError } from '../../errors.ts';
import type { Verdict } from './checks.ts';

/** The settings as configured (`csrApprover.serving.*`). */
export interface ServingSettings {
  dnsNamePattern?: string | undefined;
  ipPrefixes?: readonly string[] | undefined;
  /** Milliseconds, as the configuration's durations. */
  maxExpiration?: number | undefined;
  namesMustResolve?: boolean | undefined;
}

/** The settings, checked and compiled once. */
export interface ServingPolicy {
  dnsNamePattern?: RegExp;
  ipPrefixes?: { list: BlockList; text: string };
  maxExpirationSeconds?: number;
  namesMustResolve: boolean;
}

const setting = 'csrApprover.serving';

/** The shortest lifetime a CSR may ask for (the API server refuses less). */
const minExpirationMs = 600_000;

/** A CIDR as BlockList takes it, or undefined when it is not one. */
function prefixOf(text: string): { address: string; length: number; type: 'ipv4' | 'ipv6' } | undefined {
  const match = /^([^/\s]+)\/(\d{1,3})$/.exec(text);
  const family = isIP(match?.[1] ?? '');
  const length = Number(match?.[2]);
  if (!match || family === 0 || !(length <= (family === 4 ? 32 : 128))) return undefined;
  return { address: match[1] as string, length, type: family === 4 ? 'ipv4' : 'ipv6' };
}

function compiledPattern(pattern: string): RegExp {
  // Whole-name match; DNS names compare case-insensitively.
  return new RegExp(`^(?:${pattern})$`, 'i');
}

/** What is wrong with the settings, each with the setting it is about; empty when nothing is. */
export function servingSettingsProblems(
  settings: ServingSettings,
): { field: keyof ServingSettings; message: string }[] {
  const problems: { field: keyof ServingSettings; message: string }[] = [];
  if (settings.dnsNamePattern !== undefined) {
    try {
      compiledPattern(settings.dnsNamePattern);
    } catch (err) {
      problems.push({
        field: 'dnsNamePattern',
        message: `"${settings.dnsNamePattern}" is not a regular expression: ${(err as Error).message}`,
      });
    }
  }
  for (const prefix of settings.ipPrefixes ?? []) {
    if (!prefixOf(prefix)) {
      problems.push({
        field: 'ipPrefixes',
        message: `"${prefix}" is not an IP range (such as 10.0.0.0/16 or 2001:db8::/64)`,
      });
    }
  }
  if (settings.maxExpiration !== undefined && !(settings.maxExpiration >= minExpirationMs)) {
    problems.push({
      field: 'maxExpiration',
      message: `must be at least 10m (got ${settings.maxExpiration / 1000} s): a request may not ask for less`,
    });
  }
  return problems;
}

/** Checks and compiles the settings; a bad one is an InvalidInputError naming it. */
export function servingPolicyOf(settings: ServingSettings): ServingPolicy {
  const [problem] = servingSettingsProblems(settings);
  if (problem) throw new InvalidInputError(`${setting}.${problem.field}: ${problem.message}`);
  const policy: ServingPolicy = { namesMustResolve: settings.namesMustResolve ?? false };
  if (settings.dnsNamePattern !== undefined) policy.dnsNamePattern = compiledPattern(settings.dnsNamePattern);
  if (settings.ipPrefixes !== undefined) {
    const list = new BlockList();
    for (const prefix of settings.ipPrefixes) {
      const { address, length, type } = prefixOf(prefix) as NonNullable<ReturnType<typeof prefixOf>>;
      list.addSubnet(address, length, type);
    }
    policy.ipPrefixes = { list, text: settings.ipPrefixes.join(', ') };
  }
  if (settings.maxExpiration !== undefined) {
    policy.maxExpirationSeconds = Math.floor(settings.maxExpiration / 1000);
  }
  return policy;
}

/** Whether an address is in the allowed ranges (an IPv4-mapped IPv6 address as its IPv4 form). */
function allowed(address: string, prefixes: NonNullable<ServingPolicy['ipPrefixes']>): boolean {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address)?.[1];
  const plain = mapped ?? address;
  return prefixes.list.check(plain, isIP(plain) === 4 ? 'ipv4' : 'ipv6');
}

function deny(reason: string, message: string): Verdict {
  return { action: 'deny', reason, message };
}

/** What a serving request asks for, as the policy reads it. */
export interface ServingRequest {
  dnsNames: readonly string[];
  ipAddresses: readonly string[];
  /** `spec.expirationSeconds`, when the request sets it. */
  expirationSeconds?: number | undefined;
}

/** The first setting a serving request breaks, as a denial; undefined when it breaks none. */
export function servingPolicyViolation(request: ServingRequest, policy: ServingPolicy): Verdict | undefined {
  const pattern = policy.dnsNamePattern;
  const unmatched = pattern ? request.dnsNames.find((name) => !pattern.test(name)) : undefined;
  if (unmatched !== undefined) {
    return deny(
      'DnsNameNotAllowed',
      `${unmatched} does not match the allowed DNS name pattern ${pattern?.source} (${setting}.dnsNamePattern)`,
    );
  }
  const prefixes = policy.ipPrefixes;
  const outside = prefixes ? request.ipAddresses.find((ip) => !allowed(ip, prefixes)) : undefined;
  if (outside !== undefined) {
    return deny(
      'IpAddressNotAllowed',
      `${outside} is not in the allowed IP ranges ${prefixes?.text} (${setting}.ipPrefixes)`,
    );
  }
  const max = policy.maxExpirationSeconds;
  if (max !== undefined && request.expirationSeconds !== undefined && request.expirationSeconds > max) {
    return deny(
      'ExpirationTooLong',
      `the request asks for ${request.expirationSeconds} s; at most ${max} s is allowed (${setting}.maxExpiration)`,
    );
  }
  return undefined;
}

/**
 * Judges the lookups of a serving request's DNS names (`resolved`: each name's addresses, undefined
 * for a name that does not exist): each must resolve, and to addresses in the allowed ranges when
 * those are set. Undefined when all is well.
 */
export function assessResolution(
  request: { dnsNames: readonly string[] },
  resolved: ReadonlyMap<string, readonly string[] | undefined>,
  policy: ServingPolicy,
): Verdict | undefined {
  for (const name of request.dnsNames) {
    const addresses = resolved.get(name);
    if (!addresses?.length)
      return deny('NameDoesNotResolve', `${name} does not resolve (${setting}.namesMustResolve)`);
    const prefixes = policy.ipPrefixes;
    const outside = prefixes ? addresses.find((address) => !allowed(address, prefixes)) : undefined;
    if (outside !== undefined) {
      return deny(
        'ResolvedAddressNotAllowed',
        `${name} resolves to ${outside}, which is not in the allowed IP ranges ${prefixes?.text} (${setting}.ipPrefixes)`,
      );
    }
  }
  return undefined;
}
