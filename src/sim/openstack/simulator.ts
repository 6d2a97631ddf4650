/**
 * A simulated OpenStack on loopback HTTP, speaking the real APIs for the calls the controller and a
 * node make, so the production clients run against it unchanged:
 * - Keystone v3 `POST /identity/v3/auth/tokens` (password and application-credential methods,
 *   `X-Subject-Token`; 401 in Keystone's error body). A password authentication gets what its
 *   `auth.scope` asks for: the simulated project (by id, or by name with its domain) is a
 *   project-scoped token with its service catalog; no scope is an unscoped token, without project,
 *   roles or catalog (the user has no `default_project_id`); any other scope (an unknown project or
 *   domain, a domain scope) is Keystone's plain 401, and a project name without its domain a 400.
 *   An application credential is always scoped to its project. The simulated Nova answers 401 to
 *   an unscoped token (the production client never sends one: without a catalog it has no Nova URL);
 * - Nova v2.1 `GET /compute/v2.1/servers/{id}` and `GET /compute/v2.1/servers/detail` with
 *   `limit`/`marker` pagination and `servers_links`, clamped to `osapi_max_limit`, Nova's fault
 *   bodies (`itemNotFound`, `badRequest`, `overLimit` with Retry-After) and project isolation — which
 *   an admin token crosses as Nova's default policy lets it: `servers.get` answers any project's
 *   server (with its `tenant_id`), while `servers/detail` without `all_tenants` stays the token's own
 *   project's;
 * - the metadata service's `openstack/latest/meta_data.json`, one URL per server (the real service
 *   tells servers apart by source address, which loopback cannot);
 * - Swift's object API (the catalog's `object-store`, `/swift/v1/AUTH_<project>`) for the state
 *   store: object GET / HEAD / PUT (checking the ETag it is sent) / DELETE and the container's JSON
 *   listing with `prefix`, `marker` and `limit` (412 above its `container_listing_limit`), each with
 *   a project-scoped token; 404 for a missing container or object, ETag the MD5 of the content.
 * A world of servers with metadata, addresses and states, and fault injection: errors, throttling,
 * latency, dropped connections, revoked tokens. Options leave Swift or Nova out of the catalog and
 * serve HTTPS on a given certificate (a self-signed installation).
 */
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse, STATUS_CODES } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { OpenStackAuthOptions } from '../../cloud/openstack/auth.ts';
import type { NovaAddress, NovaServer } from '../../cloud/openstack/nova.ts';
import { listenOnLoopback } from '../../net/loopback.ts';
import { readBody } from '../../net/read-body.ts';
import {
  applyTransportFault,
  CallLog,
  FaultQueue,
  type FaultVerbs,
  faultVerbs,
  sendJson,
} from '../cloud-sim.ts';

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
  /** Its `created`, as Nova writes it (default now: `2012-08-20T21:11:09Z`); a test may put anything here. */
  created?: unknown;
}

/** Options of {@link startOpenStackSimulator}. */
export interface OpenStackSimulatorOptions {
  region?: string;
  /** Nova's `osapi_max_limit`: the largest page it answers (default 1,000). */
  maxLimit?: number;
  /** Tokens carry the `admin` role (default false; see {@link OpenStackSimulator.setAdmin}). */
  admin?: boolean;
  /** Whether the catalog lists Swift's `object-store` endpoint (default true). */
  objectStore?: boolean;
  /** Whether the catalog lists Nova's `compute` endpoint (default true; false: a Swift-only cloud). */
  compute?: boolean;
  /**
   * Serves HTTPS with this key pair (PEM) instead of HTTP: Keystone, the catalog's endpoints and
   * `OS_AUTH_URL` are then `https://` (for a self-signed installation: a CA the client does not trust).
   */
  tls?: { key: string; cert: string };
  /** Swift's `container_listing_limit`: the largest listing page (default 10,000). */
  containerListingLimit?: number;
}

/** Swift's controls: its endpoint and its containers, for tests to seed and inspect. */
export interface SwiftControls {
  /** The `object-store` endpoint of the catalog (`…/swift/v1/AUTH_<project>`). */
  storageUrl: string;
  createContainer(name: string): void;
  putObject(container: string, name: string, data: Buffer | string): void;
  getObject(container: string, name: string): Buffer | undefined;
  /**
   * Answers every authorised Swift request of `operation` (`swift.container.list`,
   * `swift.object.get`, `swift.object.head`, …) with `answer` instead, until cleared with undefined:
   * a broken store or proxy, for the tests of what the controller believes. An answer that returns
   * false lets the simulator answer as usual.
   */
  answerWith(operation: string, answer: SwiftSimAnswer | undefined): void;
}

/**
 * A test's own answer to one Swift or Nova request (see {@link SwiftControls.answerWith},
 * {@link OpenStackSimulator.answerWith}); false: as usual.
 */
export type SwiftSimAnswer = (req: IncomingMessage, res: ServerResponse, url: URL) => unknown;

/**
 * A running simulator; its faults answer in the service's envelope (Keystone's `error`, Nova's
 * `itemNotFound`/`overLimit`/…, Swift's page), a 429 with `Retry-After`.
 */
export interface OpenStackSimulator extends FaultVerbs {
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
  /** The Swift object store. */
  swift: SwiftControls;
  addServer(seed: SeedServer): SimNovaServerView;
  setStatus(id: string, status: string): void;
  deleteServer(id: string): void;
  /** The metadata-service URL the server `id` sees at `169.254.169.254/openstack/latest/meta_data.json`. */
  metadataUrl(id: string): string;
  /** Revokes every token issued so far: the next Nova call answers 401. */
  revokeTokens(): void;
  /**
   * Whether tokens issued from now on carry the `admin` role, with which Nova shows any project's
   * server by id (tokens already issued keep their roles; {@link revokeTokens} makes clients re-auth).
   */
  setAdmin(admin: boolean): void;
  /**
   * Makes `servers.get` of `askedId` answer the record of `answeredId` (a proxy or cache mixing up
   * answers); undefined restores it.
   */
  answerGetWith(askedId: string, answeredId: string | undefined): void;
  /**
   * Answers every authorised Nova request of `operation` (`servers.get`, `servers.list`) with
   * `answer` instead, until cleared with undefined: a record or page the real Nova never sends (a
   * metadata value that is no string), for the tests of what the controller believes. An answer
   * that returns false lets the simulator answer as usual.
   */
  answerWith(operation: 'servers.get' | 'servers.list', answer: SwiftSimAnswer | undefined): void;
  readonly calls: readonly OpenStackCall[];
  count(operation: string): number;
  clearCalls(): void;
  close(): Promise<void>;
}

const userName = 'kops-controller';
const userDomain = 'Default';
const projectName = 'kops';

/** Nova's fault body: `{"<name>": {"code": …, "message": …}}`. */
function novaFault(res: ServerResponse, status: number, name: string, message: string, headers = {}): void {
  sendJson(res, status, { [name]: { code: status, message } }, headers);
}

/** Keystone's error body: `{"error": {"code": …, "title": …, "message": …}}`. */
function keystoneError(
  res: ServerResponse,
  status: number,
  title: string,
  message: string,
  headers = {},
): void {
  sendJson(res, status, { error: { code: status, title, message } }, headers);
}

const faultNames: Record<number, string> = {
  400: 'badRequest',
  403: 'forbidden',
  404: 'itemNotFound',
  413: 'overLimit',
  429: 'overLimit',
};

/**
 * A server as Nova answers it: the fields the controller reads, and `created` as Nova writes it
 * (RFC 3339 to the second, `Z`: `2012-08-20T21:11:09Z`, the compute API reference's examples).
 */
export type SimNovaServerView = NovaServer & { created: unknown };

/** A server as the simulator keeps it: Nova's record and the project it belongs to. */
type SimNovaServer = SimNovaServerView & { project: string };

/** A time as Nova writes it: `2012-08-20T21:11:09Z`. */
export function novaTime(date: Date): string {
  return date.toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/** What the simulator holds. */
interface OpenStackState {
  base: string;
  region: string;
  maxLimit: number;
  projectId: string;
  password: string;
  appCredential: { id: string; secret: string };
  /** Servers in creation order, as Nova lists them (by created_at). */
  servers: Map<string, SimNovaServer>;
  /** Project-scoped tokens issued (the only ones Nova takes), and whether each carries the admin role. */
  tokens: Map<string, { admin: boolean }>;
  /** Whether tokens issued now carry the admin role. */
  admin: boolean;
  log: CallLog<OpenStackCall>;
  faults: FaultQueue;
  /** `servers.get` of a key answers the server of its value (see answerGetWith). */
  getAliases: Map<string, string>;
  objectStore: boolean;
  compute: boolean;
  containerListingLimit: number;
  /** Swift's containers of the project: name → object name → object. */
  containers: Map<string, Map<string, SwiftObject>>;
  /** Swift answers a test put in place (SwiftControls.answerWith), by operation. */
  swiftAnswers: Map<string, SwiftSimAnswer>;
  /** Nova answers a test put in place (OpenStackSimulator.answerWith), by operation. */
  novaAnswers: Map<string, SwiftSimAnswer>;
}

/** An object in the simulated Swift. */
interface SwiftObject {
  data: Buffer;
  etag: string;
  lastModified: Date;
}

/** Whether a Keystone auth body names credentials the simulator accepts. */
function validIdentity(
  state: OpenStackState,
  identity: (Record<string, unknown> & { methods?: string[] }) | undefined,
): boolean {
  const method = identity?.methods?.[0];
  if (method === 'password') {
    const user = (identity?.['password'] as { user?: Record<string, unknown> } | undefined)?.user;
    const domain = user?.['domain'] as { name?: string; id?: string } | undefined;
    return (
      user?.['name'] === userName &&
      (domain?.name === userDomain || domain?.id === 'default') &&
      user?.['password'] === state.password
    );
  }
  if (method === 'application_credential') {
    const credential = identity?.['application_credential'] as { id?: string; secret?: string } | undefined;
    return credential?.id === state.appCredential.id && credential?.secret === state.appCredential.secret;
  }
  return false;
}

/** A Keystone auth body, as far as the simulator reads it. */
interface AuthBody {
  auth?: { identity?: Record<string, unknown> & { methods?: string[] }; scope?: unknown };
}

/** A domain reference (`{name}` or `{id}`) naming the simulated `Default` domain. */
function isDefaultDomain(domain: unknown): boolean {
  const ref = domain as { id?: unknown; name?: unknown } | undefined;
  return ref?.name === userDomain || ref?.id === 'default';
}

/**
 * What a password authentication's `auth.scope` gets, as Keystone v3 answers it: `unscoped` without
 * a scope, `project` for the simulated project (the only one the user has a role on), and for
 * anything else Keystone's error: 400 for a malformed project reference (its ValidationError), else
 * 401 (ProjectNotFound, DomainNotFound and "no access" all become a plain Unauthorized).
 */
function scopeOf(
  state: OpenStackState,
  scope: unknown,
): 'unscoped' | 'project' | { status: 400 | 401; message: string } {
  if (scope === undefined || scope === null) return 'unscoped';
  const unauthorized = {
    status: 401,
    message: 'The request you have made requires authentication.',
  } as const;
  const project = (scope as { project?: unknown }).project as
    | { id?: unknown; name?: unknown; domain?: unknown }
    | undefined;
  if (typeof project !== 'object' || project === null) return unauthorized;
  const invalid = (attribute: string) =>
    ({
      status: 400,
      message: `Expecting to find ${attribute} in project. The server could not comply with the request since it is either malformed or otherwise incorrect. The client is assumed to be in error.`,
    }) as const;
  if (project.name) {
    if (project.domain === undefined) return invalid('domain');
    return project.name === projectName && isDefaultDomain(project.domain) ? 'project' : unauthorized;
  }
  if (project.id) return project.id === state.projectId ? 'project' : unauthorized;
  return invalid('id or name');
}

/** A time as Keystone writes it: microseconds and `Z` (`2015-11-07T02:58:43.578887Z`, its api-ref samples). */
function keystoneTime(ms: number): string {
  return new Date(ms).toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
}

/** An unscoped token's document: who and until when, with no project, roles or catalog. */
function unscopedTokenDocument(method: string | undefined) {
  return {
    token: {
      methods: [method],
      user: { id: 'user-kops-controller', name: userName, domain: { id: 'default', name: userDomain } },
      expires_at: keystoneTime(Date.now() + 3_600_000),
      issued_at: keystoneTime(Date.now()),
    },
  };
}

/** A token's document: its project and a catalog naming the simulated Keystone and Nova. */
function tokenDocument(state: OpenStackState, method: string | undefined, admin: boolean) {
  const { base, region } = state;
  const endpoint = (iface: string) => ({
    interface: iface,
    region,
    region_id: region,
    url: `${base}/compute/v2.1`,
  });
  return {
    token: {
      ...unscopedTokenDocument(method).token,
      project: { id: state.projectId, name: projectName, domain: { id: 'default', name: userDomain } },
      roles: (admin ? ['admin', 'member', 'reader'] : ['member', 'reader']).map((name) => ({
        id: `role-${name}`,
        name,
      })),
      catalog: [
        {
          type: 'identity',
          name: 'keystone',
          endpoints: [{ interface: 'public', region, url: `${base}/identity/v3` }],
        },
        ...(state.compute
          ? [{ type: 'compute', name: 'nova', endpoints: ['public', 'internal'].map(endpoint) }]
          : []),
        ...(state.objectStore
          ? [
              {
                type: 'object-store',
                name: 'swift',
                endpoints: ['public', 'internal'].map((iface) => ({
                  interface: iface,
                  region,
                  region_id: region,
                  url: `${base}/swift/v1/AUTH_${state.projectId}`,
                })),
              },
            ]
          : []),
      ],
    },
  };
}

/** `POST /identity/v3/auth/tokens`: a token in `X-Subject-Token` for valid credentials. */
async function authenticate(state: OpenStackState, req: IncomingMessage, res: ServerResponse) {
  let body: AuthBody;
  try {
    body = JSON.parse((await readBody(req, 64 * 1024)).toString('utf8'));
  } catch {
    return keystoneError(res, 400, 'Bad Request', 'Expecting to find auth in request body.');
  }
  const identity = body.auth?.identity;
  if (!validIdentity(state, identity)) {
    return keystoneError(res, 401, 'Unauthorized', 'The request you have made requires authentication.');
  }
  const method = identity?.methods?.[0];
  // An application credential carries its project; a password gets the scope it asks for.
  const scope = method === 'application_credential' ? 'project' : scopeOf(state, body.auth?.scope);
  if (typeof scope === 'object') {
    return keystoneError(
      res,
      scope.status,
      scope.status === 400 ? 'Bad Request' : 'Unauthorized',
      scope.message,
    );
  }
  const token = `gAAAAA${randomBytes(24).toString('base64url')}`;
  if (scope === 'unscoped') {
    return sendJson(res, 201, unscopedTokenDocument(method), { 'x-subject-token': token });
  }
  state.tokens.set(token, { admin: state.admin });
  sendJson(res, 201, tokenDocument(state, method, state.admin), { 'x-subject-token': token });
}

function view(server: SimNovaServer): SimNovaServerView {
  const { project, ...rest } = server;
  return { ...rest, tenant_id: project };
}

/** `GET /compute/v2.1/servers/detail`: the project's servers, `limit`/`marker` paged. */
function listServers(state: OpenStackState, url: URL, res: ServerResponse) {
  const limitParam = url.searchParams.get('limit');
  const limit = limitParam === null ? state.maxLimit : Number(limitParam);
  if (!Number.isInteger(limit) || limit < 0) {
    return novaFault(
      res,
      400,
      'badRequest',
      `Invalid input for field/attribute limit. Value: ${limitParam}.`,
    );
  }
  const pageSize = Math.min(limit, state.maxLimit);
  const own = [...state.servers.values()].filter((s) => s.project === state.projectId);
  const marker = url.searchParams.get('marker');
  let start = 0;
  if (marker !== null) {
    const index = own.findIndex((s) => s.id === marker);
    if (index < 0) return novaFault(res, 400, 'badRequest', `marker [${marker}] not found`);
    start = index + 1;
  }
  const page = own.slice(start, start + pageSize);
  const next = `${state.base}/compute/v2.1/servers/detail?limit=${pageSize}&marker=${page.at(-1)?.id}`;
  const full = page.length === pageSize && pageSize > 0;
  sendJson(res, 200, {
    servers: page.map(view),
    ...(full ? { servers_links: [{ rel: 'next', href: next }] } : {}),
  });
}

/** The metadata service's `meta_data.json` as server `id` reads it. */
function metadataDocument(state: OpenStackState, path: string, res: ServerResponse) {
  const server = state.servers.get(decodeURIComponent(path.split('/')[2] as string));
  if (!server) {
    res.writeHead(404).end('Not Found');
    return;
  }
  sendJson(res, 200, {
    uuid: server.id,
    name: server.name,
    hostname: server.name,
    project_id: server.project,
    availability_zone: server['OS-EXT-AZ:availability_zone'] ?? 'nova',
    meta: server.metadata ?? {},
  });
}

/** Swift's plain error page, as its proxy answers it. */
function swiftError(res: ServerResponse, status: number, text: string, headers = {}): void {
  const body = `<html><h1>${text}</h1><p>${text}.</p></html>`;
  res.writeHead(status, { 'content-type': 'text/html; charset=UTF-8', ...headers });
  res.end(body);
}

/** A Swift path `/swift/v1/<account>/<container>[/<object>]`, decoded. */
function swiftPathOf(path: string): { account: string; container: string; object?: string } | undefined {
  const match = /^\/swift\/v1\/([^/]+)\/([^/]+)(?:\/(.+))?$/.exec(path);
  if (!match) return undefined;
  const [, account, container, object] = match as unknown as [string, string, string, string | undefined];
  return {
    account: decodeURIComponent(account),
    container: decodeURIComponent(container),
    ...(object === undefined ? {} : { object: object.split('/').map(decodeURIComponent).join('/') }),
  };
}

/** The Swift operation a request is, or undefined when it is not Swift's. */
function swiftOperationOf(method: string | undefined, path: string): string | undefined {
  const target = swiftPathOf(path);
  if (!target) return path.startsWith('/swift/') ? 'swift.unknown' : undefined;
  if (target.object === undefined) return method === 'GET' ? 'swift.container.list' : 'swift.unknown';
  const verbs: Record<string, string> = {
    GET: 'swift.object.get',
    HEAD: 'swift.object.head',
    PUT: 'swift.object.put',
    DELETE: 'swift.object.delete',
  };
  return verbs[method ?? ''] ?? 'swift.unknown';
}

/** One Swift request, its token already checked. */
async function serveSwift(
  state: OpenStackState,
  operation: string,
  url: URL,
  req: IncomingMessage,
  res: ServerResponse,
) {
  const target = swiftPathOf(url.pathname);
  if (!target || operation === 'swift.unknown') return swiftError(res, 405, 'Method Not Allowed');
  if (target.account !== `AUTH_${state.projectId}`) return swiftError(res, 403, 'Forbidden');
  const container = state.containers.get(target.container);
  if (operation === 'swift.container.list') {
    if (!container) return swiftError(res, 404, 'Not Found');
    const limitParam = url.searchParams.get('limit');
    const limit = limitParam === null ? state.containerListingLimit : Number(limitParam);
    if (!Number.isInteger(limit) || limit < 0) return swiftError(res, 412, 'Precondition Failed');
    if (limit > state.containerListingLimit) {
      res.writeHead(412, { 'content-type': 'text/plain' });
      res.end(`Maximum limit is ${state.containerListingLimit}`);
      return;
    }
    const prefix = url.searchParams.get('prefix') ?? '';
    const marker = url.searchParams.get('marker') ?? '';
    const names = [...container.keys()]
      .filter((name) => name.startsWith(prefix) && name > marker)
      .sort()
      .slice(0, limit);
    if (url.searchParams.get('format') !== 'json') {
      res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' });
      res.end(names.map((n) => `${n}\n`).join(''));
      return;
    }
    return sendJson(
      res,
      200,
      names.map((name) => {
        const object = container.get(name) as SwiftObject;
        return {
          name,
          hash: object.etag,
          bytes: object.data.length,
          content_type: 'application/octet-stream',
          last_modified: object.lastModified.toISOString().replace(/Z$/, ''),
        };
      }),
    );
  }
  const name = target.object as string;
  if (operation === 'swift.object.put') {
    const data = await readBody(req, 64 * 1024 * 1024);
    if (!container) return swiftError(res, 404, 'Not Found');
    const etag = createHash('md5').update(data).digest('hex');
    const sent = req.headers.etag;
    if (typeof sent === 'string' && sent.replace(/"/g, '').toLowerCase() !== etag) {
      return swiftError(res, 422, 'Unprocessable Entity');
    }
    const object = { data, etag, lastModified: new Date() };
    container.set(name, object);
    res.writeHead(201, { etag, 'last-modified': object.lastModified.toUTCString(), 'content-length': 0 });
    res.end();
    return;
  }
  const object = container?.get(name);
  if (!object) return swiftError(res, 404, 'Not Found');
  if (operation === 'swift.object.delete') {
    container?.delete(name);
    res.writeHead(204).end();
    return;
  }
  res.writeHead(200, {
    etag: object.etag,
    'content-type': 'application/octet-stream',
    'content-length': object.data.length,
    'last-modified': object.lastModified.toUTCString(),
    'accept-ranges': 'bytes',
  });
  res.end(operation === 'swift.object.head' ? undefined : object.data);
}

/** The operation a request is. */
function operationOf(method: string | undefined, path: string): string {
  if (method === 'POST' && path === '/identity/v3/auth/tokens') return 'tokens.create';
  const swift = swiftOperationOf(method, path);
  if (swift) return swift;
  if (method !== 'GET') return 'unknown';
  if (path === '/compute/v2.1/servers/detail') return 'servers.list';
  if (/^\/compute\/v2\.1\/servers\/[^/]+$/.test(path)) return 'servers.get';
  if (/^\/metadata\/[^/]+\/openstack\/latest\/meta_data\.json$/.test(path)) return 'metadata';
  return 'unknown';
}

/** Answers the request's injected fault; true when one answered (or dropped) it. */
async function answerFault(
  state: OpenStackState,
  operation: string,
  req: IncomingMessage,
  res: ServerResponse,
) {
  const fault = state.faults.take(operation);
  if (await applyTransportFault(fault, req)) return true;
  if (!fault?.status) return false;
  const retry = fault.retryAfterSeconds ? { 'retry-after': String(fault.retryAfterSeconds) } : {};
  if (operation.startsWith('swift.')) {
    swiftError(res, fault.status, `simulated fault ${fault.status}`, retry);
    return true;
  }
  if (operation === 'tokens.create') {
    const title = STATUS_CODES[fault.status] ?? 'Error';
    keystoneError(res, fault.status, title, `simulated fault ${fault.status}`, retry);
    return true;
  }
  novaFault(
    res,
    fault.status,
    faultNames[fault.status] ?? 'computeFault',
    `simulated fault ${fault.status}`,
    retry,
  );
  return true;
}

/** One request: logged, its fault, then Keystone, the metadata service or (with a token) Nova. */
async function serveOpenStack(state: OpenStackState, req: IncomingMessage, res: ServerResponse) {
  const url = new URL(req.url ?? '/', state.base);
  const path = url.pathname;
  const operation = operationOf(req.method, path);
  state.log.add({ operation, path: `${path}${url.search}` });
  if (await answerFault(state, operation, req, res)) return;
  if (operation === 'tokens.create') return authenticate(state, req, res);
  if (operation === 'metadata') return metadataDocument(state, path, res);
  if (operation === 'unknown') return novaFault(res, 404, 'itemNotFound', 'The resource could not be found.');
  const token = req.headers['x-auth-token'];
  const roles = typeof token === 'string' ? state.tokens.get(token) : undefined;
  if (operation.startsWith('swift.')) {
    // Swift's auth middleware: no valid token, a plain 401 (the body of a PUT unread).
    if (!roles) return swiftError(res, 401, 'Unauthorized');
    const answer = state.swiftAnswers.get(operation);
    if (answer && (await answer(req, res, url)) !== false) return;
    return serveSwift(state, operation, url, req, res);
  }
  if (!roles) {
    return keystoneError(res, 401, 'Unauthorized', 'The request you have made requires authentication.');
  }
  const answer = state.novaAnswers.get(operation);
  if (answer && (await answer(req, res, url)) !== false) return;
  if (operation === 'servers.list') return listServers(state, url, res);
  const id = decodeURIComponent(path.slice('/compute/v2.1/servers/'.length));
  const server = state.servers.get(state.getAliases.get(id) ?? id);
  // Nova's default `os_compute_api:servers:show` rule: the server's project, or an admin.
  if (!server || (server.project !== state.projectId && !roles.admin)) {
    return novaFault(res, 404, 'itemNotFound', `Instance ${id} could not be found.`);
  }
  sendJson(res, 200, { server: view(server) });
}

/** Nova's record of a seeded server, its addresses on the network `net`. */
function seededServer(state: OpenStackState, seed: SeedServer): SimNovaServer {
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
  return {
    id: seed.id ?? randomUUID(),
    name: seed.name,
    status: seed.status ?? 'ACTIVE',
    project: seed.project ?? state.projectId,
    metadata: { ...seed.metadata },
    addresses,
    'OS-EXT-AZ:availability_zone': seed.zone ?? 'nova',
    created: 'created' in seed ? seed.created : novaTime(new Date()),
  };
}

/** The `OS_*` variables and auth options of the simulator's credentials. */
function credentialsOf(state: OpenStackState) {
  const authBase = {
    authUrl: `${state.base}/identity/v3`,
    region: state.region,
    endpointInterface: 'public',
  } as const;
  return {
    authUrl: authBase.authUrl,
    env: {
      OS_AUTH_URL: authBase.authUrl,
      OS_REGION_NAME: state.region,
      OS_USERNAME: userName,
      OS_USER_DOMAIN_NAME: userDomain,
      OS_PASSWORD: state.password,
      OS_PROJECT_NAME: projectName,
      OS_PROJECT_DOMAIN_NAME: userDomain,
    },
    applicationCredentialAuth: {
      ...authBase,
      credentials: { method: 'application-credential' as const, ...state.appCredential },
    },
    passwordAuth: {
      ...authBase,
      credentials: {
        method: 'password' as const,
        user: { name: userName, domain: { name: userDomain } },
        password: state.password,
        project: { name: projectName, domain: { name: userDomain } },
      },
    },
  };
}

/** Starts the simulator on 127.0.0.1 and an ephemeral port. */
export async function startOpenStackSimulator(
  options: OpenStackSimulatorOptions = {},
): Promise<OpenStackSimulator> {
  const state: OpenStackState = {
    base: '',
    region: options.region ?? 'RegionOne',
    maxLimit: options.maxLimit ?? 1_000,
    projectId: randomBytes(16).toString('hex'),
    password: randomBytes(12).toString('base64url'),
    appCredential: { id: randomBytes(16).toString('hex'), secret: randomBytes(24).toString('base64url') },
    servers: new Map(),
    tokens: new Map(),
    admin: options.admin ?? false,
    log: new CallLog(),
    faults: new FaultQueue(),
    getAliases: new Map(),
    objectStore: options.objectStore ?? true,
    compute: options.compute ?? true,
    containerListingLimit: options.containerListingLimit ?? 10_000,
    containers: new Map(),
    swiftAnswers: new Map(),
    novaAnswers: new Map(),
  };
  const serve = (req: IncomingMessage, res: ServerResponse) => {
    serveOpenStack(state, req, res).catch((err: unknown) => {
      if (!res.headersSent) novaFault(res, 500, 'computeFault', (err as Error).message);
    });
  };
  const server = options.tls ? createHttpsServer(options.tls, serve) : createServer(serve);
  const listener = await listenOnLoopback(server);
  state.base = options.tls ? listener.url.replace('http://', 'https://') : listener.url;
  const existing = (id: string) => {
    const found = state.servers.get(id);
    if (!found) throw new Error(`no simulated server ${id}`);
    return found;
  };
  return {
    ...credentialsOf(state),
    region: state.region,
    projectId: state.projectId,
    addServer: (seed) => {
      const record = seededServer(state, seed);
      state.servers.set(record.id, record);
      return view(record);
    },
    setStatus: (id, status) => {
      existing(id).status = status;
    },
    deleteServer: (id) => {
      existing(id);
      state.servers.delete(id);
    },
    metadataUrl: (id) => `${state.base}/metadata/${encodeURIComponent(id)}/openstack/latest/meta_data.json`,
    answerGetWith: (askedId, answeredId) => {
      if (answeredId === undefined) state.getAliases.delete(askedId);
      else state.getAliases.set(askedId, answeredId);
    },
    answerWith: (operation, answer) => {
      if (answer) state.novaAnswers.set(operation, answer);
      else state.novaAnswers.delete(operation);
    },
    ...faultVerbs(state.faults),
    swift: {
      get storageUrl() {
        return `${state.base}/swift/v1/AUTH_${state.projectId}`;
      },
      createContainer: (name) => {
        if (!state.containers.has(name)) state.containers.set(name, new Map());
      },
      putObject: (container, name, data) => {
        const objects = state.containers.get(container);
        if (!objects) throw new Error(`no simulated Swift container ${container}`);
        const body = Buffer.from(data);
        const etag = createHash('md5').update(body).digest('hex');
        objects.set(name, { data: body, etag, lastModified: new Date() });
      },
      getObject: (container, name) => state.containers.get(container)?.get(name)?.data,
      answerWith: (operation, answer) => {
        if (answer) state.swiftAnswers.set(operation, answer);
        else state.swiftAnswers.delete(operation);
      },
    },
    revokeTokens: () => state.tokens.clear(),
    setAdmin: (admin) => {
      state.admin = admin;
    },
    calls: state.log.calls,
    count: (operation) => state.log.count(operation),
    clearCalls: () => state.log.clear(),
    close: () => listener.close(),
  };
}
