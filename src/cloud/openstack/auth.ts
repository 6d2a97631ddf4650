/**
 * The controller's OpenStack credentials, read from the `OS_*` environment as kops reads them
 * (gophercloud's `AuthOptionsFromEnv`, plus the `OS_USER_DOMAIN_*` / `OS_PROJECT_DOMAIN_*` names an
 * openrc file carries), and the Keystone v3 request body they become. Pure: no I/O here.
 */
import { ConfigError } from '../../errors.ts';

/** A user or project named by id, or by name within a domain (id or name). */
export type NamedInDomain = { id: string } | { name: string; domain: { id: string } | { name: string } };

/** How the controller authenticates to Keystone. */
export type OpenStackCredentials =
  | { method: 'password'; user: NamedInDomain; password: string; project?: NamedInDomain }
  /** An application credential: by id, or by name with its user; always scoped to its project. */
  | { method: 'application-credential'; id?: string; name?: string; user?: NamedInDomain; secret: string };

/** Where and how to authenticate, and which region's compute endpoint to use. */
export interface OpenStackAuthOptions {
  /** Keystone's URL (`OS_AUTH_URL`), with or without the trailing `/v3`. */
  authUrl: string;
  /** `OS_REGION_NAME`: kops requires it. */
  region: string;
  /** The catalog interface of the endpoints used (`OS_INTERFACE`, default `public`). */
  endpointInterface: 'public' | 'internal' | 'admin';
  credentials: OpenStackCredentials;
}

type Env = Record<string, string | undefined>;

function first(env: Env, ...names: string[]): string | undefined {
  for (const name of names) {
    const value = env[name]?.trim();
    if (value) return value;
  }
  return undefined;
}

/** A domain from `<prefix>_ID` / `<prefix>_NAME`, falling back to `OS_DOMAIN_*` (and `Default`). */
function domainOf(env: Env, prefix: string): { id: string } | { name: string } {
  const id = first(env, `${prefix}_ID`, 'OS_DOMAIN_ID');
  if (id) return { id };
  return { name: first(env, `${prefix}_NAME`, 'OS_DOMAIN_NAME') ?? 'Default' };
}

function userOf(env: Env): NamedInDomain | undefined {
  const id = first(env, 'OS_USER_ID', 'OS_USERID');
  if (id) return { id };
  const name = first(env, 'OS_USERNAME');
  return name ? { name, domain: domainOf(env, 'OS_USER_DOMAIN') } : undefined;
}

function projectOf(env: Env): NamedInDomain | undefined {
  const id = first(env, 'OS_PROJECT_ID', 'OS_TENANT_ID');
  if (id) return { id };
  const name = first(env, 'OS_PROJECT_NAME', 'OS_TENANT_NAME');
  return name ? { name, domain: domainOf(env, 'OS_PROJECT_DOMAIN') } : undefined;
}

/**
 * The options the `OS_*` variables give. An application credential (`OS_APPLICATION_CREDENTIAL_ID`
 * or `_NAME`, with `_SECRET`) wins over a password, as in gophercloud. Throws ConfigError naming
 * the missing variable.
 */
export function openstackAuthFromEnv(env: Env = process.env): OpenStackAuthOptions {
  const authUrl = first(env, 'OS_AUTH_URL');
  if (!authUrl) throw new ConfigError('OpenStack: OS_AUTH_URL is not set (the Keystone URL)');
  try {
    const url = new URL(authUrl);
    if (url.protocol !== 'https:' && url.protocol !== 'http:') throw new Error(url.protocol);
  } catch {
    throw new ConfigError(`OpenStack: OS_AUTH_URL "${authUrl}" is not an http(s) URL`);
  }
  const region = first(env, 'OS_REGION_NAME');
  if (!region) throw new ConfigError('OpenStack: OS_REGION_NAME is not set (kops requires the region)');
  const endpointInterface = (first(env, 'OS_INTERFACE', 'OS_ENDPOINT_TYPE') ?? 'public').replace(/URL$/, '');
  if (endpointInterface !== 'public' && endpointInterface !== 'internal' && endpointInterface !== 'admin') {
    throw new ConfigError(`OpenStack: OS_INTERFACE "${endpointInterface}" is not public, internal or admin`);
  }
  const base = { authUrl, region, endpointInterface } as const;

  const appSecret = first(env, 'OS_APPLICATION_CREDENTIAL_SECRET');
  const appId = first(env, 'OS_APPLICATION_CREDENTIAL_ID');
  const appName = first(env, 'OS_APPLICATION_CREDENTIAL_NAME');
  if (appId || appName) {
    if (!appSecret) {
      throw new ConfigError(
        'OpenStack: OS_APPLICATION_CREDENTIAL_SECRET is not set for the application credential',
      );
    }
    if (appId)
      return { ...base, credentials: { method: 'application-credential', id: appId, secret: appSecret } };
    const user = userOf(env);
    if (!user) {
      throw new ConfigError(
        'OpenStack: an application credential named by OS_APPLICATION_CREDENTIAL_NAME needs OS_USERNAME or OS_USER_ID',
      );
    }
    return {
      ...base,
      credentials: { method: 'application-credential', name: appName as string, user, secret: appSecret },
    };
  }

  const user = userOf(env);
  const password = first(env, 'OS_PASSWORD');
  if (!user || !password) {
    throw new ConfigError(
      'OpenStack: no credentials: set OS_APPLICATION_CREDENTIAL_ID and _SECRET, or OS_USERNAME (or OS_USER_ID) and OS_PASSWORD',
    );
  }
  const project = projectOf(env);
  return { ...base, credentials: { method: 'password', user, password, ...(project ? { project } : {}) } };
}

/** The Keystone v3 tokens URL of an auth URL given with or without its version. */
export function keystoneTokensUrl(authUrl: string): URL {
  const url = new URL(authUrl);
  const path = url.pathname.replace(/\/+$/, '');
  url.pathname = `${/\/v3$/.test(path) ? path : `${path}/v3`}/auth/tokens`;
  return url;
}

/** The body of `POST /v3/auth/tokens` for the credentials (Keystone API v3, "Password authentication"). */
export function keystoneAuthBody(credentials: OpenStackCredentials): unknown {
  if (credentials.method === 'application-credential') {
    const { id, name, user, secret } = credentials;
    return {
      auth: {
        identity: {
          methods: ['application_credential'],
          application_credential: id ? { id, secret } : { name, user, secret },
        },
      },
    };
  }
  const { user, password, project } = credentials;
  return {
    auth: {
      identity: { methods: ['password'], password: { user: { ...user, password } } },
      ...(project ? { scope: { project } } : {}),
    },
  };
}
