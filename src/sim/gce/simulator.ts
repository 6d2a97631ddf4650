/**
 * The simulated Google Cloud endpoints, served over loopback HTTP so that the production code talks to
 * it through google-auth-library unchanged: compute v1 REST (instances, managed instance groups,
 * instance templates, Shielded VM identity) with pagination and Google's error JSON, an OAuth2 token
 * endpoint, the metadata server's identity-token path and a JWKS.
 */
import { createPublicKey, type KeyObject, randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { asKopsError, httpStatusOf, InvalidInputError, UnauthenticatedError } from '../../errors.ts';
import { listenOnLoopback } from '../../net/loopback.ts';
import { compileFilter } from './filter.ts';
import { IdentityIssuer, type IdentityTokenRequest } from './identity-issuer.ts';
import { GceWorld } from './model.ts';

/** One request the simulator served, named after the API method (`instances.get`, `token`, …). */
export interface GceCall {
  operation: string;
  method: string;
  path: string;
  query: Record<string, string>;
}

/** Options of {@link startGceSimulator}. */
export interface GceSimulatorOptions {
  /** The project seeded resources go to unless they name another. */
  project?: string;
  /** Page size used when a request sets no `maxResults` (the real default is 500). */
  defaultPageSize?: number;
}

/** A running simulator. */
export interface GceSimulator {
  /** Base URL of the compute API, e.g. `http://127.0.0.1:PORT/compute/v1`. */
  endpoint: string;
  /** OAuth2 token endpoint (refresh-token grant) for `OAuth2Client({ endpoints: { oauth2TokenUrl } })`. */
  tokenUri: string;
  /** The JWKS the identity tokens verify against. */
  jwksUri: string;
  /** The metadata server root (`…/computeMetadata/v1`), for the identity-token path. */
  metadataUri: string;
  /** A refresh token the token endpoint accepts. */
  refreshToken: string;
  /** An access token the compute endpoints accept, for clients given a preset token. */
  accessToken: string;
  /** The seeded world: instances, templates, MIGs, and reads of them. */
  world: GceWorld;
  /** Seeding shortcuts, bound to {@link world}. */
  seedProject: GceWorld['seedProject'];
  seedInstance: GceWorld['seedInstance'];
  seedTemplate: GceWorld['seedTemplate'];
  seedMig: GceWorld['seedMig'];
  seedInstanceGroup: GceWorld['seedInstanceGroup'];
  /** The identity-token issuer (rotate its key with `issuer.rotate()`). */
  issuer: IdentityIssuer;
  /** Mints an identity token for an instance, as its metadata server would. */
  identityToken(zone: string, name: string, request: IdentityTokenRequest, project?: string): string;
  /** Every request served since start or the last {@link clearCalls}. */
  readonly calls: readonly GceCall[];
  /** How many served calls had this operation name. */
  count(operation: string): number;
  clearCalls(): void;
  /**
   * Makes the next `times` compute requests fail with this HTTP status (429, 503, …); with
   * `operation`, only requests of that operation (`jwks`, `instances.get`, …), whatever their kind.
   * `reason` sets `error.errors[0].reason` (default: the status's usual one, e.g. `forbidden` for 403).
   * Compute Engine's own answer to an exhausted rate quota is not a 429 but
   * `failNext(n, 403, op, { reason: 'rateLimitExceeded' })` (or `userRateLimitExceeded`): a 403
   * `PERMISSION_DENIED` whose error names domain `usageLimits` and that reason.
   */
  failNext(times: number, status: number, operation?: string, options?: { reason?: string }): void;
  /** Delays the next `times` compute requests (or those of `operation`) by `ms` before they are served. */
  delayNext(times: number, ms: number, operation?: string): void;
  close(): Promise<void>;
}

const reasons: Record<number, [string, string]> = {
  400: ['invalid', 'INVALID_ARGUMENT'],
  401: ['required', 'UNAUTHENTICATED'],
  403: ['forbidden', 'PERMISSION_DENIED'],
  404: ['notFound', 'NOT_FOUND'],
  429: ['rateLimitExceeded', 'RESOURCE_EXHAUSTED'],
  500: ['backendError', 'INTERNAL'],
  503: ['backendError', 'UNAVAILABLE'],
};

/**
 * Error details that depend on the reason rather than the status: the rate-quota reasons Compute
 * Engine answers with 403 (cloud.google.com/compute/api-quota), in the `usageLimits` domain and with
 * the messages it sends, and the OAuth scope refusal.
 */
const reasonDetails: Record<string, { domain: string; message: (projectNumber: string) => string }> = {
  rateLimitExceeded: {
    domain: 'usageLimits',
    message: (n) =>
      `Quota exceeded for quota metric 'Read requests' and limit 'Read requests per minute' of service 'compute.googleapis.com' for consumer 'project_number:${n}'.`,
  },
  userRateLimitExceeded: { domain: 'usageLimits', message: () => 'User Rate Limit Exceeded' },
  insufficientPermissions: {
    domain: 'global',
    message: () => 'Request had insufficient authentication scopes.',
  },
};

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json; charset=UTF-8',
    'content-length': Buffer.byteLength(text),
  });
  res.end(text);
}

/**
 * Google's error envelope: `{ error: { code, message, errors: [{ message, domain, reason }], status } }`;
 * `reason` overrides the status's usual one (a 403 is a missing permission or an exhausted rate quota).
 */
function sendError(
  res: ServerResponse,
  status: number,
  message: string,
  reason?: { reason: string; domain: string },
): void {
  const [usual, code] = reasons[status] ?? ['backendError', 'UNKNOWN'];
  const { reason: why, domain } = reason ?? { reason: usual, domain: 'global' };
  sendJson(res, status, {
    error: { code: status, message, errors: [{ message, domain, reason: why }], status: code },
  });
}

function paginate<T>(items: T[], query: Record<string, string>, defaultPageSize: number) {
  const size = Math.min(Number(query['maxResults'] ?? defaultPageSize) || defaultPageSize, 500);
  const token = query['pageToken'];
  const start = token ? Number(Buffer.from(token, 'base64url').toString()) : 0;
  if (!Number.isInteger(start) || start < 0 || start > items.length) {
    throw new InvalidInputError(`Invalid value for field 'pageToken': ${token}`);
  }
  const end = start + size;
  return {
    page: items.slice(start, end),
    nextPageToken: end < items.length ? Buffer.from(String(end)).toString('base64url') : undefined,
  };
}

/** One page of an aggregatedList: resources grouped under `zones/<zone>` scopes. */
function aggregate(
  all: Array<{ zone: string; json: unknown }>,
  field: string,
  query: Record<string, string>,
  pageSize: number,
) {
  const { page, nextPageToken } = paginate(all, query, pageSize);
  const items: Record<string, Record<string, unknown[]>> = {};
  for (const { zone, json } of page) {
    const scope = items[`zones/${zone}`] ?? { [field]: [] };
    scope[field]?.push(json);
    items[`zones/${zone}`] = scope;
  }
  return { items, nextPageToken };
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString();
}

type Route = {
  method: string;
  pattern: RegExp;
  operation: string;
  auth: 'bearer' | 'none' | 'metadata';
  handle: (
    params: string[],
    query: Record<string, string>,
    req: IncomingMessage,
    res: ServerResponse,
  ) => Promise<void> | void;
};

/** A metadata-server path answering fixed text, with the header the real one sends. */
function metadataText(pattern: RegExp, operation: string, text: string): Route {
  return {
    method: 'GET',
    pattern,
    operation,
    auth: 'metadata',
    handle: (_params, _q, _req, res) => {
      res.writeHead(200, { 'content-type': 'application/text', 'metadata-flavor': 'Google' });
      res.end(text);
    },
  };
}

/** Starts the simulator on 127.0.0.1 and an ephemeral port. */
export async function startGceSimulator(options: GceSimulatorOptions = {}): Promise<GceSimulator> {
  const world = new GceWorld(options.project ?? 'sim-project');
  world.seedProject(world.defaultProject);
  const issuer = new IdentityIssuer();
  const pageSize = options.defaultPageSize ?? 500;
  const refreshToken = `1//sim-${randomBytes(12).toString('base64url')}`;
  const accessToken = `ya29.sim-${randomBytes(18).toString('base64url')}`;
  const accessTokens = new Set<string>([accessToken]);
  const calls: GceCall[] = [];
  let faults: { times: number; status: number; operation?: string; reason?: string } = {
    times: 0,
    status: 503,
  };
  let delays: { times: number; ms: number; operation?: string } = { times: 0, ms: 0 };

  const identityToken = (
    zone: string,
    name: string,
    request: IdentityTokenRequest,
    project = world.defaultProject,
  ) => {
    const instance = world.instance(project, zone, name);
    return issuer.issue(
      {
        projectId: project,
        projectNumber: world.projectNumber(project),
        zone,
        instanceId: instance.id,
        instanceName: name,
        instanceCreationTimestamp: Math.floor(instance.creationTimestamp.getTime() / 1000),
        serviceAccountId: '100000000000000000001',
        serviceAccountEmail: `${world.projectNumber(project)}-compute@developer.gserviceaccount.com`,
      },
      request,
    );
  };

  const p = '^/compute/v1/projects/([^/]+)';
  const routes: Route[] = [
    {
      method: 'GET',
      pattern: new RegExp(`${p}/zones/([^/]+)/instances/([^/]+)$`),
      operation: 'instances.get',
      auth: 'bearer',
      handle: ([project, zone, name], _q, _req, res) =>
        sendJson(res, 200, world.instanceJson(world.instance(project!, zone!, name!))),
    },
    {
      method: 'GET',
      pattern: new RegExp(`${p}/zones/([^/]+)/instances/([^/]+)/getShieldedInstanceIdentity$`),
      operation: 'instances.getShieldedInstanceIdentity',
      auth: 'bearer',
      handle: ([project, zone, name], _q, _req, res) => {
        const keys = world.shieldedKeys(project!, zone!, name!);
        const pem = (k: KeyObject) => createPublicKey(k).export({ format: 'pem', type: 'spki' }) as string;
        sendJson(res, 200, {
          kind: 'compute#shieldedInstanceIdentity',
          signingKey: { ekPub: pem(keys.signing) },
          encryptionKey: { ekPub: pem(keys.encryption) },
        });
      },
    },
    {
      method: 'GET',
      pattern: new RegExp(`${p}/zones/([^/]+)/instances$`),
      operation: 'instances.list',
      auth: 'bearer',
      handle: ([project, zone], query, _req, res) => {
        const filter = compileFilter(query['filter']);
        const items = world
          .instances(project!, zone!)
          .map((i) => world.instanceJson(i))
          .filter(filter);
        const { page, nextPageToken } = paginate(items, query, pageSize);
        sendJson(res, 200, { kind: 'compute#instanceList', items: page, nextPageToken });
      },
    },
    {
      method: 'GET',
      pattern: new RegExp(`${p}/aggregated/instances$`),
      operation: 'instances.aggregatedList',
      auth: 'bearer',
      handle: ([project], query, _req, res) => {
        const filter = compileFilter(query['filter']);
        const all = world.instances(project!).map((i) => ({ zone: i.zone, json: world.instanceJson(i) }));
        const { page, nextPageToken } = paginate(
          all.filter((x) => filter(x.json)),
          query,
          pageSize,
        );
        const items: Record<string, { instances: unknown[] }> = {};
        for (const { zone, json } of page) {
          const scope = items[`zones/${zone}`] ?? { instances: [] };
          scope.instances.push(json);
          items[`zones/${zone}`] = scope;
        }
        sendJson(res, 200, { kind: 'compute#instanceAggregatedList', items, nextPageToken });
      },
    },
    {
      method: 'GET',
      pattern: new RegExp(`${p}/zones/([^/]+)/instanceGroupManagers/([^/]+)$`),
      operation: 'instanceGroupManagers.get',
      auth: 'bearer',
      handle: ([project, zone, name], _q, _req, res) =>
        sendJson(res, 200, world.migJson(world.mig(project!, zone!, name!))),
    },
    {
      method: 'GET',
      pattern: new RegExp(`${p}/zones/([^/]+)/instanceGroupManagers$`),
      operation: 'instanceGroupManagers.list',
      auth: 'bearer',
      handle: ([project, zone], query, _req, res) => {
        const filter = compileFilter(query['filter']);
        const items = world
          .migs(project!, zone!)
          .map((m) => world.migJson(m))
          .filter(filter);
        const { page, nextPageToken } = paginate(items, query, pageSize);
        sendJson(res, 200, { kind: 'compute#instanceGroupManagerList', items: page, nextPageToken });
      },
    },
    {
      method: 'GET',
      pattern: new RegExp(`${p}/aggregated/instanceGroupManagers$`),
      operation: 'instanceGroupManagers.aggregatedList',
      auth: 'bearer',
      handle: ([project], query, _req, res) => {
        const filter = compileFilter(query['filter']);
        const all = world.migs(project!).map((m) => ({ zone: m.zone, json: world.migJson(m) }));
        sendJson(res, 200, {
          kind: 'compute#instanceGroupManagerAggregatedList',
          ...aggregate(
            all.filter((x) => filter(x.json)),
            'instanceGroupManagers',
            query,
            pageSize,
          ),
        });
      },
    },
    {
      method: 'POST',
      pattern: new RegExp(`${p}/zones/([^/]+)/instanceGroupManagers/([^/]+)/listManagedInstances$`),
      operation: 'instanceGroupManagers.listManagedInstances',
      auth: 'bearer',
      handle: ([project, zone, name], query, _req, res) => {
        const filter = compileFilter(query['filter']);
        const items = world.managedInstancesJson(world.mig(project!, zone!, name!)).filter(filter);
        const { page, nextPageToken } = paginate(items, query, pageSize);
        sendJson(res, 200, { managedInstances: page, nextPageToken });
      },
    },
    {
      method: 'GET',
      pattern: new RegExp(`${p}/global/instanceTemplates/([^/]+)$`),
      operation: 'instanceTemplates.get',
      auth: 'bearer',
      handle: ([project, name], _q, _req, res) =>
        sendJson(res, 200, world.templateJson(world.template(project!, name!))),
    },
    {
      method: 'POST',
      pattern: /^\/token$/,
      operation: 'token',
      auth: 'none',
      handle: async (_params, _q, req, res) => {
        const form = new URLSearchParams(await readBody(req));
        if (form.get('grant_type') !== 'refresh_token' || form.get('refresh_token') !== refreshToken) {
          sendJson(res, 400, { error: 'invalid_grant', error_description: 'Bad Request' });
          return;
        }
        const token = `ya29.sim-${randomBytes(18).toString('base64url')}`;
        accessTokens.add(token);
        sendJson(res, 200, {
          access_token: token,
          expires_in: 3599,
          token_type: 'Bearer',
          scope: form.get('scope') ?? '',
        });
      },
    },
    {
      method: 'GET',
      pattern: /^\/oauth2\/v3\/certs$/,
      operation: 'jwks',
      auth: 'none',
      handle: (_params, _q, _req, res) => sendJson(res, 200, issuer.jwks()),
    },
    // What gcp-metadata asks to tell whether it runs on GCE (GCE_METADATA_HOST points it here).
    metadataText(
      /^\/computeMetadata\/v1\/instance\/?$/,
      'metadata.instance',
      'attributes/\nhostname\nid\nservice-accounts/\nzone\n',
    ),
    {
      // The VM's service-account token, which Application Default Credentials use on GCE.
      method: 'GET',
      pattern: /^\/computeMetadata\/v1\/instance\/service-accounts\/default\/token$/,
      operation: 'metadata.token',
      auth: 'metadata',
      handle: (_params, _q, _req, res) => {
        const token = `ya29.sim-${randomBytes(18).toString('base64url')}`;
        accessTokens.add(token);
        res.writeHead(200, { 'content-type': 'application/json', 'metadata-flavor': 'Google' });
        res.end(JSON.stringify({ access_token: token, expires_in: 3599, token_type: 'Bearer' }));
      },
    },
    metadataText(/^\/computeMetadata\/v1\/universe\/universe-domain$/, 'metadata.universe', 'googleapis.com'),
    {
      method: 'GET',
      pattern: /^\/computeMetadata\/v1\/instance\/service-accounts\/default\/identity$/,
      operation: 'identity',
      auth: 'metadata',
      handle: (_params, query, _req, res) => {
        // The real metadata server knows its caller; the simulator is told with `instance=<zone>/<name>`.
        const [zone, name] = (query['instance'] ?? '').split('/');
        if (!query['audience'] || !zone || !name) {
          throw new InvalidInputError('audience and instance=<zone>/<name> are required');
        }
        const format = query['format'] === 'full' ? 'full' : 'standard';
        const token = identityToken(zone, name, { audience: query['audience'], format });
        res.writeHead(200, { 'content-type': 'text/html', 'metadata-flavor': 'Google' });
        res.end(token);
      },
    },
  ];

  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    const query = Object.fromEntries(url.searchParams);
    const route = routes.find((r) => r.method === req.method && r.pattern.test(url.pathname));
    calls.push({
      operation: route?.operation ?? 'unknown',
      method: req.method ?? '',
      path: url.pathname,
      query,
    });
    void (async () => {
      if (!route) {
        sendError(res, 404, `The requested URL ${url.pathname} was not found on this server.`);
        return;
      }
      if (route.auth === 'bearer') {
        const auth = req.headers.authorization ?? '';
        if (!auth.startsWith('Bearer ') || !accessTokens.has(auth.slice(7))) {
          throw new UnauthenticatedError(
            'Request is missing required authentication credential. Expected OAuth 2 access token, login cookie or other valid authentication credential.',
          );
        }
      }
      if (route.auth === 'metadata' && req.headers['metadata-flavor'] !== 'Google') {
        res.writeHead(403, { 'content-type': 'text/html' });
        res.end('Missing required header: Metadata-Flavor');
        return;
      }
      const aimedAt = (operation: string | undefined) =>
        operation ? operation === route.operation : route.auth === 'bearer';
      if (delays.times > 0 && aimedAt(delays.operation)) {
        delays = { ...delays, times: delays.times - 1 };
        await new Promise((resolve) => setTimeout(resolve, delays.ms));
      }
      if (faults.times > 0 && aimedAt(faults.operation)) {
        faults = { ...faults, times: faults.times - 1 };
        const details = faults.reason === undefined ? undefined : reasonDetails[faults.reason];
        sendError(
          res,
          faults.status,
          details?.message(world.projectNumber(world.defaultProject)) ?? `simulated failure ${faults.status}`,
          faults.reason === undefined
            ? undefined
            : { reason: faults.reason, domain: details?.domain ?? 'global' },
        );
        return;
      }
      const params = (route.pattern.exec(url.pathname) ?? []).slice(1).map(decodeURIComponent);
      await route.handle(params, query, req, res);
    })().catch((err: unknown) => {
      if (!res.headersSent) sendError(res, httpStatusOf(err), asKopsError(err).message);
    });
  });
  const listener = await listenOnLoopback(server);
  const base = listener.url;

  return {
    endpoint: `${base}/compute/v1`,
    tokenUri: `${base}/token`,
    jwksUri: `${base}/oauth2/v3/certs`,
    metadataUri: `${base}/computeMetadata/v1`,
    refreshToken,
    accessToken,
    world,
    seedProject: world.seedProject.bind(world),
    seedInstance: world.seedInstance.bind(world),
    seedTemplate: world.seedTemplate.bind(world),
    seedMig: world.seedMig.bind(world),
    seedInstanceGroup: world.seedInstanceGroup.bind(world),
    issuer,
    identityToken,
    calls,
    count: (operation) => calls.filter((c) => c.operation === operation).length,
    clearCalls: () => {
      calls.length = 0;
    },
    failNext: (times, status, operation, options) => {
      faults = {
        times,
        status,
        ...(operation ? { operation } : {}),
        ...(options?.reason ? { reason: options.reason } : {}),
      };
    },
    delayNext: (times, ms, operation) => {
      delays = { times, ms, ...(operation ? { operation } : {}) };
    },
    close: listener.close,
  };
}
