/**
 * A simulated OpenStack on loopback HTTP, speaking the real APIs for the calls the controller and a
 * node make, so the production clients run against it unchanged:
 * - Keystone v3 `POST /identity/v3/auth/tokens` (password and application-credential methods,
 *   `X-Subject-Token`, a project-scoped token with its service catalog; 401 in Keystone's error body);
 * - Nova v2.1 `GET /compute/v2.1/servers/{id}` and `GET /compute/v2.1/servers/detail` with
 *   `limit`/`marker` pagination and `servers_links`, clamped to `osapi_max_limit`, Nova's fault
 *   bodies (`itemNotFound`, `badRequest`, `overLimit` with Retry-After) and project isolation;
 * - the metadata service's `openstack/latest/meta_data.json`, one URL per server (the real service
 *   tells servers apart by source address, which loopback cannot).
 * A world of servers with metadata, addresses and states, and fault injection: errors, throttling,
 * latency, dropped connections, revoked tokens.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { OpenStackAuthOptions } from '../../cloud/openstack/auth.ts';
import type { NovaAddress, NovaServer } from '../../cloud/openstack/nova.ts';
import { listenOnLoopback } from '../../net/loopback.ts';
import { readBody } from '../../net/read-body.ts';

/** One request the simulator served: `tokens.create`, `servers.get`, `servers.list`, `metadata`. */
export interface OpenStackCall {
  operation: string;
  path: string;
}

/** A server to seed. */
export interface SeedServer {
  id?: string;
  name: string;
  status?: string;
  /** Project (tenant) id; default the simulator's project. */
  project?: string;
  metadata?: Record<string, string>;
  /** Fixed addresses on the network `net`. */
  fixed?: string[];
  floating?: string[];
  zone?: string;
}

/** Options of {@link startOpenStackSimulator}. */
export interface OpenStackSimulatorOptions {
  region?: string;
  /** Nova's `osapi_max_limit`: the largest page it answers (default 1,000). */
  maxLimit?: number;
}

/** A fault for the next `times` requests of `operation` (any, when absent). */
interface Fault {
  times: number;
  operation?: string;
  status?: number;
  retryAfterSeconds?: number;
  delayMs?: number;
  drop?: boolean;
}

/** A running simulator. */
export interface OpenStackSimulator {
  /** `OS_AUTH_URL`. */
  authUrl: string;
  region: string;
  /** The project every seeded server belongs to unless it names another. */
  projectId: string;
  /** Password credentials that Keystone accepts, as `OS_*` variables. */
  env: Record<string, string>;
  /** Auth options with an application credential Keystone accepts. */
  applicationCredentialAuth: OpenStackAuthOptions;
  /** Auth options with the password credentials. */
  passwordAuth: OpenStackAuthOptions;
  addServer(seed: SeedServer): NovaServer;
  setStatus(id: string, status: string): void;
  deleteServer(id: string): void;
  /** The metadata-service URL the server `id` sees at `169.254.169.254/openstack/latest/meta_data.json`. */
  metadataUrl(id: string): string;
  /** Faults for the next `times` requests (to `operation`, when given). */
  failNext(times: number, status: number, operation?: string): void;
  throttleNext(times: number, retryAfterSeconds: number, operation?: string): void;
  delayNext(times: number, delayMs: number, operation?: string): void;
  dropNext(times: number, operation?: string): void;
  /** Removes every fault not yet spent. */
  resetFaults(): void;
  /** Revokes every token issued so far: the next Nova call answers 401. */
  revokeTokens(): void;
  readonly calls: readonly OpenStackCall[];
  count(operation: string): number;
  clearCalls(): void;
  close(): Promise<void>;
}

const userName = 'kops-controller';
const userDomain = 'Default';
const projectName = 'kops';

function send(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
    ...headers,
  });
  res.end(text);
}

/** Nova's fault body: `{"<name>": {"code": …, "message": …}}`. */
function novaFault(res: ServerResponse, status: number, name: string, message: string, headers = {}): void {
  send(res, status, { [name]: { code: status, message } }, headers);
}

/** Keystone's error body. */
function keystoneError(res: ServerResponse, status: number, title: string, message: string): void {
  send(res, status, { error: { code: status, title, message } });
}

const faultNames: Record<number, string> = {
  400: 'badRequest',
  403: 'forbidden',
  404: 'itemNotFound',
  413: 'overLimit',
  429: 'overLimit',
};

/** Starts the simulator on 127.0.0.1 and an ephemeral port. */
export async function startOpenStackSimulator(
  options: OpenStackSimulatorOptions = {},
): Promise<OpenStackSimulator> {
  const region = options.region ?? 'RegionOne';
  const maxLimit = options.maxLimit ?? 1_000;
  const projectId = randomBytes(16).toString('hex');
  const password = randomBytes(12).toString('base64url');
  const appCredential = {
    id: randomBytes(16).toString('hex'),
    secret: randomBytes(24).toString('base64url'),
  };
  /** Servers in creation order, as Nova lists them (by created_at). */
  const servers = new Map<string, NovaServer & { project: string }>();
  const tokens = new Set<string>();
  const calls: OpenStackCall[] = [];
  let faults: Fault[] = [];
  let base = '';

  const planFault = (operation: string): Fault | undefined => {
    const fault = faults.find((f) => f.operation === undefined || f.operation === operation);
    if (!fault) return undefined;
    fault.times--;
    faults = faults.filter((f) => f.times > 0);
    return fault;
  };

  const authenticate = async (req: IncomingMessage, res: ServerResponse) => {
    let body: { auth?: { identity?: Record<string, unknown> & { methods?: string[] } } };
    try {
      body = JSON.parse((await readBody(req, 64 * 1024)).toString('utf8'));
    } catch {
      keystoneError(res, 400, 'Bad Request', 'Expecting to find auth in request body.');
      return;
    }
    const identity = body.auth?.identity;
    const method = identity?.methods?.[0];
    let ok = false;
    if (method === 'password') {
      const user = (identity?.['password'] as { user?: Record<string, unknown> } | undefined)?.user;
      const domain = user?.['domain'] as { name?: string; id?: string } | undefined;
      ok =
        user?.['name'] === userName &&
        (domain?.name === userDomain || domain?.id === 'default') &&
        user?.['password'] === password;
    } else if (method === 'application_credential') {
      const credential = identity?.['application_credential'] as { id?: string; secret?: string } | undefined;
      ok = credential?.id === appCredential.id && credential?.secret === appCredential.secret;
    }
    if (!ok) {
      keystoneError(res, 401, 'Unauthorized', 'The request you have made requires authentication.');
      return;
    }
    const token = `gAAAAA${randomBytes(24).toString('base64url')}`;
    tokens.add(token);
    const expiresAt = new Date(Date.now() + 3_600_000).toISOString();
    const endpoint = (iface: string) => ({
      interface: iface,
      region,
      region_id: region,
      url: `${base}/compute/v2.1`,
    });
    send(
      res,
      201,
      {
        token: {
          methods: [method],
          expires_at: expiresAt,
          issued_at: new Date().toISOString(),
          project: { id: projectId, name: projectName, domain: { id: 'default', name: userDomain } },
          catalog: [
            {
              type: 'identity',
              name: 'keystone',
              endpoints: [{ interface: 'public', region, url: `${base}/identity/v3` }],
            },
            { type: 'compute', name: 'nova', endpoints: ['public', 'internal'].map(endpoint) },
          ],
        },
      },
      { 'x-subject-token': token },
    );
  };

  const view = (server: NovaServer & { project: string }): NovaServer => {
    const { project, ...rest } = server;
    return { ...rest, tenant_id: project };
  };

  const listServers = (url: URL, res: ServerResponse) => {
    const limitParam = url.searchParams.get('limit');
    const limit = limitParam === null ? maxLimit : Number(limitParam);
    if (!Number.isInteger(limit) || limit < 0) {
      novaFault(res, 400, 'badRequest', `Invalid input for field/attribute limit. Value: ${limitParam}.`);
      return;
    }
    const pageSize = Math.min(limit, maxLimit);
    const own = [...servers.values()].filter((s) => s.project === projectId);
    const marker = url.searchParams.get('marker');
    let start = 0;
    if (marker !== null) {
      const index = own.findIndex((s) => s.id === marker);
      if (index < 0) {
        novaFault(res, 400, 'badRequest', `marker [${marker}] not found`);
        return;
      }
      start = index + 1;
    }
    const page = own.slice(start, start + pageSize);
    const links =
      page.length === pageSize && pageSize > 0
        ? [
            {
              rel: 'next',
              href: `${base}/compute/v2.1/servers/detail?limit=${pageSize}&marker=${page.at(-1)?.id}`,
            },
          ]
        : undefined;
    send(res, 200, { servers: page.map(view), ...(links ? { servers_links: links } : {}) });
  };

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', base);
    const path = url.pathname;
    let operation = 'unknown';
    if (req.method === 'POST' && path === '/identity/v3/auth/tokens') operation = 'tokens.create';
    else if (req.method === 'GET' && path === '/compute/v2.1/servers/detail') operation = 'servers.list';
    else if (req.method === 'GET' && /^\/compute\/v2\.1\/servers\/[^/]+$/.test(path))
      operation = 'servers.get';
    else if (req.method === 'GET' && /^\/metadata\/[^/]+\/openstack\/latest\/meta_data\.json$/.test(path))
      operation = 'metadata';
    calls.push({ operation, path: `${path}${url.search}` });

    const fault = planFault(operation);
    if (fault?.delayMs) await new Promise((resolve) => setTimeout(resolve, fault.delayMs));
    if (fault?.drop) {
      req.socket.destroy();
      return;
    }
    if (fault?.status) {
      const retry = fault.retryAfterSeconds ? { 'retry-after': String(fault.retryAfterSeconds) } : {};
      const name = faultNames[fault.status] ?? 'computeFault';
      novaFault(res, fault.status, name, `simulated fault ${fault.status}`, retry);
      return;
    }

    if (operation === 'tokens.create') return authenticate(req, res);
    if (operation === 'metadata') {
      const id = decodeURIComponent(path.split('/')[2] as string);
      const server = servers.get(id);
      if (!server) {
        res.writeHead(404).end('Not Found');
        return;
      }
      send(res, 200, {
        uuid: server.id,
        name: server.name,
        hostname: server.name,
        project_id: server.project,
        availability_zone: server['OS-EXT-AZ:availability_zone'] ?? 'nova',
        meta: server.metadata ?? {},
      });
      return;
    }
    if (operation === 'unknown') {
      novaFault(res, 404, 'itemNotFound', 'The resource could not be found.');
      return;
    }
    const token = req.headers['x-auth-token'];
    if (typeof token !== 'string' || !tokens.has(token)) {
      keystoneError(res, 401, 'Unauthorized', 'The request you have made requires authentication.');
      return;
    }
    if (operation === 'servers.list') return listServers(url, res);
    const id = decodeURIComponent(path.slice('/compute/v2.1/servers/'.length));
    const server = servers.get(id);
    if (!server || server.project !== projectId) {
      novaFault(res, 404, 'itemNotFound', `Instance ${id} could not be found.`);
      return;
    }
    send(res, 200, { server: view(server) });
  };

  const server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      if (!res.headersSent) novaFault(res, 500, 'computeFault', (err as Error).message);
    });
  });
  const listener = await listenOnLoopback(server);
  base = listener.url;

  const authBase = { authUrl: `${base}/identity/v3`, region, endpointInterface: 'public' } as const;
  const addServer = (seed: SeedServer): NovaServer => {
    const id = seed.id ?? randomUUID();
    const addresses: Record<string, NovaAddress[]> = {
      net: [
        ...(seed.fixed ?? []).map((addr) => ({
          addr,
          version: addr.includes(':') ? 6 : 4,
          'OS-EXT-IPS:type': 'fixed',
        })),
        ...(seed.floating ?? []).map((addr) => ({ addr, version: 4, 'OS-EXT-IPS:type': 'floating' })),
      ],
    };
    const record = {
      id,
      name: seed.name,
      status: seed.status ?? 'ACTIVE',
      project: seed.project ?? projectId,
      metadata: { ...seed.metadata },
      addresses,
      'OS-EXT-AZ:availability_zone': seed.zone ?? 'nova',
    };
    servers.set(id, record);
    return view(record);
  };
  const existing = (id: string) => {
    const found = servers.get(id);
    if (!found) throw new Error(`no simulated server ${id}`);
    return found;
  };

  return {
    authUrl: authBase.authUrl,
    region,
    projectId,
    env: {
      OS_AUTH_URL: authBase.authUrl,
      OS_REGION_NAME: region,
      OS_USERNAME: userName,
      OS_USER_DOMAIN_NAME: userDomain,
      OS_PASSWORD: password,
      OS_PROJECT_NAME: projectName,
      OS_PROJECT_DOMAIN_NAME: userDomain,
    },
    applicationCredentialAuth: {
      ...authBase,
      credentials: { method: 'application-credential', ...appCredential },
    },
    passwordAuth: {
      ...authBase,
      credentials: {
        method: 'password',
        user: { name: userName, domain: { name: userDomain } },
        password,
        project: { name: projectName, domain: { name: userDomain } },
      },
    },
    addServer,
    setStatus: (id, status) => {
      existing(id).status = status;
    },
    deleteServer: (id) => {
      existing(id);
      servers.delete(id);
    },
    metadataUrl: (id) => `${base}/metadata/${encodeURIComponent(id)}/openstack/latest/meta_data.json`,
    failNext: (times, status, operation) =>
      faults.push({ times, status, ...(operation ? { operation } : {}) }),
    throttleNext: (times, retryAfterSeconds, operation) =>
      faults.push({ times, status: 429, retryAfterSeconds, ...(operation ? { operation } : {}) }),
    delayNext: (times, delayMs, operation) =>
      faults.push({ times, delayMs, ...(operation ? { operation } : {}) }),
    dropNext: (times, operation) => faults.push({ times, drop: true, ...(operation ? { operation } : {}) }),
    resetFaults: () => {
      faults = [];
    },
    revokeTokens: () => tokens.clear(),
    calls,
    count: (operation) => calls.filter((c) => c.operation === operation).length,
    clearCalls: () => {
      calls.length = 0;
    },
    close: () => listener.close(),
  };
}
