/**
 * The HTTP edge of the simulated API server: authenticates, routes, applies faults, authorizes and
 * runs one verb, answering every failure with the Status a real kube-apiserver would send.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { TLSSocket } from 'node:tls';
import { KopsError } from '../../errors.ts';
import type { Logger } from '../../log.ts';
import type { Authenticator, Authorizer } from './auth.ts';
import {
  checkMetadataTypes,
  checkUnknownFields,
  decodeObject,
  dryRunOf,
  mediaTypeOf,
  parseBody,
  readBody,
  warningHeaders,
} from './decode.ts';
import {
  apiGroupList,
  apiGroupOf,
  apiResourceList,
  coreApiVersions,
  openApiJson,
  openApiProtobuf,
  versionInfo,
} from './discovery.ts';
import type { FaultInjector, FaultPlan } from './faults.ts';
import { listPage, matchesFilter, objectFilterOf } from './lists.ts';
import { type ApiServerMetrics, nonResourceLabels, type RequestLabels, resourceLabels } from './metrics.ts';
import { isRecord, type KubeObject, type SimUser } from './objects.ts';
import { applyJsonPatch, applyMergePatch, applyStrategicMergePatch, patchContentTypes } from './patch.ts';
import { decodeProtobuf, protobufMediaType } from './protobuf.ts';
import { apiVersionOf, type ResourceType } from './resources.ts';
import { review } from './reviews.ts';
import { type InfoRoute, type ResourceRoute, routeOf } from './routes.ts';
import {
  badRequest,
  conflict,
  forbidden,
  invalid,
  methodNotAllowed,
  notFound,
  type Status,
  statusOf,
  success,
  unknownPath,
  unsupportedMediaType,
} from './status.ts';
import type { SimStore, StoredEntry } from './store.ts';
import type { WriteTarget } from './strategies.ts';
import { tableJson, wantsTable } from './tables.ts';
import { serveWatch } from './watch.ts';

/** What the handler works with. */
export interface HandlerContext {
  store: SimStore;
  faults: FaultInjector;
  authenticator: Authenticator;
  authorizer: Authorizer;
  logger: Logger;
  bookmarkIntervalMs: number;
  /** `host:port`, for `/api`'s serverAddressByClientCIDRs. */
  serverAddress: () => string;
  /** The counters `/metrics` serves. */
  metrics: ApiServerMetrics;
}

interface Call {
  req: IncomingMessage;
  res: ServerResponse;
  url: URL;
  user: SimUser;
  ctx: HandlerContext;
  route: ResourceRoute;
  verb: string;
}

const publicPaths = new Set(['/healthz', '/livez', '/readyz', '/version']);

function sendJson(
  res: ServerResponse,
  code: number,
  body: string | object,
  headers: Record<string, string> = {},
): void {
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  res.writeHead(code, {
    'Content-Type': 'application/json',
    'Content-Length': Buffer.byteLength(text),
    ...headers,
  });
  res.end(text);
}

/** Writes an error as a Status; anything that is not a typed error is a 500 and is logged as a bug. */
export function sendError(res: ServerResponse, err: unknown, logger: Logger): void {
  let status: Status;
  if (err instanceof KopsError) {
    status = statusOf(err);
  } else {
    logger.error({ err }, 'simulated apiserver: unexpected error');
    status = {
      kind: 'Status',
      apiVersion: 'v1',
      metadata: {},
      status: 'Failure',
      message: `Internal error occurred: ${(err as Error)?.message ?? String(err)}`,
      reason: 'InternalError',
      code: 500,
    };
  }
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const headers: Record<string, string> = {};
  const retryAfter = status.details?.retryAfterSeconds;
  if (retryAfter !== undefined && (status.code === 429 || status.code === 503 || status.code === 504))
    headers['Retry-After'] = String(retryAfter);
  if (status.code === 413) headers['Connection'] = 'close';
  sendJson(res, status.code ?? 500, status, headers);
}

function renderOf(call: Call): (entry: StoredEntry) => string {
  if (!wantsTable(call.req.headers.accept)) return (entry) => entry.json;
  return (entry) => tableJson(call.route.type, [entry], Number(entry.object.metadata.resourceVersion));
}

function verbOf(method: string, route: ResourceRoute, url: URL): string {
  const watch = route.watchPath || ['true', '1'].includes(url.searchParams.get('watch') ?? '');
  switch (method) {
    case 'GET':
    case 'HEAD':
      if (watch) return 'watch';
      return route.name ? 'get' : 'list';
    case 'POST':
      return route.name ? '' : 'create';
    case 'PUT':
      return route.name ? 'update' : '';
    case 'PATCH':
      return route.name ? 'patch' : '';
    case 'DELETE':
      return route.name ? 'delete' : 'deletecollection';
    default:
      return '';
  }
}

function checkScope(route: ResourceRoute, verb: string): void {
  const type = route.type;
  if (type.reviewOnly) {
    if (verb !== 'create') throw methodNotAllowed();
    return;
  }
  if (route.subresource && !['get', 'update', 'patch'].includes(verb)) throw methodNotAllowed();
  // A namespaced object is addressed inside its namespace; only list and watch may span all of them.
  if (type.namespaced && route.namespace === undefined && verb !== 'list' && verb !== 'watch')
    throw unknownPath();
}

const writeVerbs = new Set(['create', 'update', 'patch', 'delete', 'deletecollection']);

async function applyFaults(plan: FaultPlan, verb: string): Promise<void> {
  if (plan.latencyMs > 0) await new Promise((resolve) => setTimeout(resolve, plan.latencyMs));
  if (plan.error && !(plan.afterCommit && writeVerbs.has(verb))) throw plan.error;
}

/** A response whose answer nobody receives: the write of an `afterCommit` fault is carried out into it. */
function lostAnswer(): ServerResponse {
  const lost = { headersSent: false, writeHead: () => lost, setHeader: () => lost, end: () => lost };
  return lost as unknown as ServerResponse;
}

function authorize(call: Call, object?: KubeObject): void {
  const { route, verb, user } = call;
  call.ctx.authorizer.authorize(
    {
      user,
      verb,
      group: route.type.group,
      resource: route.type.plural,
      ...(route.subresource ? { subresource: route.subresource } : {}),
      ...(route.namespace ? { namespace: route.namespace } : {}),
      ...(route.name ? { name: route.name } : {}),
      ...(object ? { object } : {}),
    },
    route.type,
  );
}

function listJson(
  type: ResourceType,
  items: readonly StoredEntry[],
  resourceVersion: number,
  extra: Record<string, unknown> = {},
): string[] {
  const metadata = JSON.stringify({ resourceVersion: String(resourceVersion), ...extra });
  const head = `{"kind":"${type.kind}List","apiVersion":"${apiVersionOf(type)}","metadata":${metadata},"items":[`;
  const parts = [head];
  // Items are joined in slices so that a 100,000-object list never builds one giant array of strings twice.
  for (let i = 0; i < items.length; i += 1000) {
    parts.push(
      (i > 0 ? ',' : '') +
        items
          .slice(i, i + 1000)
          .map((e) => e.json)
          .join(','),
    );
  }
  parts.push(']}');
  return parts;
}

function serveList(call: Call, plan: FaultPlan): void {
  const { url, route, ctx, res } = call;
  const q = url.searchParams;
  const filter = objectFilterOf(route.type, q.get('labelSelector'), q.get('fieldSelector'));
  const page = listPage(ctx.store, route.type, route.namespace, filter, {
    resourceVersion: q.get('resourceVersion'),
    resourceVersionMatch: q.get('resourceVersionMatch'),
    limit: q.get('limit'),
    continueToken: q.get('continue'),
    forceExpired: plan.expire,
  });
  if (wantsTable(call.req.headers.accept)) {
    sendJson(res, 200, tableJson(route.type, page.items, page.resourceVersion, page.continueToken));
    return;
  }
  const extra: Record<string, unknown> = {};
  if (page.continueToken) extra['continue'] = page.continueToken;
  if (page.remainingItemCount !== undefined) extra['remainingItemCount'] = page.remainingItemCount;
  res.writeHead(200, { 'Content-Type': 'application/json' });
  for (const part of listJson(route.type, page.items, page.resourceVersion, extra)) res.write(part);
  res.end();
}

function serveWatchCall(call: Call, plan: FaultPlan): void {
  const { url, route, ctx } = call;
  const q = url.searchParams;
  const filter = objectFilterOf(route.type, q.get('labelSelector'), q.get('fieldSelector'));
  const timeout = q.get('timeoutSeconds');
  if (timeout !== null && !/^\d+$/.test(timeout))
    throw badRequest(`invalid timeoutSeconds ${JSON.stringify(timeout)}: must be a non-negative integer`);
  const rv = q.get('resourceVersion') ?? '';
  if (rv !== '' && !/^\d+$/.test(rv))
    throw badRequest(`invalid resource version: ${JSON.stringify(rv)}: must be a non-negative integer`);
  serveWatch(
    {
      store: ctx.store,
      faults: ctx.faults,
      type: route.type,
      namespace: route.namespace,
      filter,
      params: {
        resourceVersion: rv,
        allowWatchBookmarks: q.get('allowWatchBookmarks') === 'true',
        sendInitialEvents: q.get('sendInitialEvents') === 'true',
        ...(timeout !== null && Number(timeout) > 0 ? { timeoutSeconds: Number(timeout) } : {}),
        forceExpired: plan.expire,
      },
      bookmarkIntervalMs: ctx.bookmarkIntervalMs,
      render: renderOf(call),
    },
    call.res,
  );
}

function checkIdentity(call: Call, obj: KubeObject): void {
  const { route } = call;
  if (route.name !== undefined && obj.metadata.name !== route.name) {
    throw badRequest(
      `the name of the object (${obj.metadata.name ?? ''}) does not match the name on the URL (${route.name})`,
    );
  }
  if (route.type.namespaced) {
    if (obj.metadata.namespace && obj.metadata.namespace !== route.namespace) {
      throw badRequest(
        'the namespace of the provided object does not match the namespace sent on the request',
      );
    }
    obj.metadata.namespace = route.namespace as string;
  }
}

async function serveCreate(call: Call): Promise<void> {
  const { route, ctx, res, url } = call;
  const { obj, warnings } = decodeObject(call.req, call.url, call.route.type, await readBody(call.req));
  authorize(call, obj);
  if (route.type.reviewOnly) {
    sendJson(
      res,
      201,
      review(route.type, obj, call.user, ctx.authenticator, ctx.authorizer),
      warningHeaders(warnings),
    );
    return;
  }
  checkIdentity(call, obj);
  const entry = ctx.store.createEntry(route.type, obj, {
    target: 'main',
    requester: call.user,
    dryRun: dryRunOf(url),
  });
  sendJson(res, 201, entry.json, warningHeaders(warnings));
}

/**
 * The certificates admission plugins: approving or denying a CSR needs `approve`, and writing its
 * certificate needs `sign`, on `signers` named the CSR's signerName (or `<domain>/*`).
 */
function checkSignerPermission(call: Call, obj: KubeObject): void {
  const { route, ctx, user } = call;
  if (route.type.plural !== 'certificatesigningrequests') return;
  const current = ctx.store.entry(route.type, undefined, route.name as string);
  const before = current ? (JSON.parse(current.json) as KubeObject) : undefined;
  const status = (o: KubeObject | undefined) => (isRecord(o?.['status']) ? o['status'] : {});
  let verb: 'approve' | 'sign' | undefined;
  if (route.subresource === 'approval') verb = 'approve';
  else if (route.subresource === 'status' && status(obj)['certificate'] !== status(before)['certificate'])
    verb = 'sign';
  if (!verb) return;
  const spec = isRecord(before?.['spec']) ? before['spec'] : {};
  const signerName = typeof spec['signerName'] === 'string' ? spec['signerName'] : '';
  const names = [signerName, `${signerName.split('/')[0]}/*`];
  const allowed = names.some(
    (name) =>
      ctx.authorizer.decide({ user, verb, group: 'certificates.k8s.io', resource: 'signers', name }).allowed,
  );
  if (!allowed) {
    throw forbidden(
      `certificatesigningrequests.certificates.k8s.io "${route.name ?? ''}" is forbidden: user not permitted to ${verb} requests with signerName "${signerName}"`,
      route.type,
      route.name,
    );
  }
}

/**
 * A PUT whose body names a `metadata.uid` is conditional on it: `rest.DefaultUpdatedObjectInfo`
 * turns the object's UID into a storage precondition (apiserver pkg/registry/rest/update.go,
 * `Preconditions`), and the store refuses another object's with 409 Conflict, `Operation cannot be
 * fulfilled on nodes "n": Precondition failed: UID in precondition: <body's>, UID in object meta:
 * <stored>` (apiserver pkg/storage/etcd3 `checkPreconditions`). An empty UID is filled from storage.
 */
function checkUpdatedUid(call: Call, obj: KubeObject): void {
  const given = obj.metadata.uid;
  if (typeof given !== 'string' || given === '') return;
  const { route, ctx } = call;
  const stored = ctx.store.entry(route.type, route.namespace, route.name as string);
  const uid = stored?.object.metadata.uid;
  if (stored && uid !== given) {
    throw conflict(
      route.type,
      route.name as string,
      `Precondition failed: UID in precondition: ${given}, UID in object meta: ${uid ?? ''}`,
    );
  }
}

async function serveUpdate(call: Call): Promise<void> {
  const { route, ctx, res, url } = call;
  const { obj, warnings } = decodeObject(call.req, call.url, call.route.type, await readBody(call.req));
  checkIdentity(call, obj);
  checkUpdatedUid(call, obj);
  checkSignerPermission(call, obj);
  const entry = ctx.store.updateEntry(route.type, obj, {
    target: (route.subresource ?? 'main') as WriteTarget,
    dryRun: dryRunOf(url),
  });
  sendJson(res, 200, entry.json, warningHeaders(warnings));
}

const patchTypes = [patchContentTypes.json, patchContentTypes.merge, patchContentTypes.strategic];

/**
 * A patch that sets `metadata.uid` to another object's: refused as the API server refuses it. A PATCH
 * carries no preconditions (the patch handler's UpdatedObjectInfo has no object, so no UID
 * precondition reaches storage); the patched object then fails update validation, the UID being
 * immutable (ValidateObjectMetaUpdate): 422 Invalid, `Node "n" is invalid: metadata.uid: Invalid
 * value: "<uid>": field is immutable`. A client that names the uid it read thus never patches an
 * object re-created under the same name.
 */
function checkPatchedUid(
  type: ResourceType,
  name: string,
  original: unknown,
  patched: Record<string, unknown>,
) {
  const before =
    isRecord(original) && isRecord(original['metadata']) ? original['metadata']['uid'] : undefined;
  const after = isRecord(patched['metadata']) ? patched['metadata']['uid'] : undefined;
  if (after === undefined || after === '' || after === before) return;
  throw invalid(type, name, [
    { type: 'Invalid', field: 'metadata.uid', value: after, detail: 'field is immutable' },
  ]);
}

async function servePatch(call: Call): Promise<void> {
  const { route, ctx, res, url } = call;
  const media = mediaTypeOf(call.req);
  if (!patchTypes.includes(media as (typeof patchTypes)[number]))
    throw unsupportedMediaType(media, [...patchTypes]);
  const patch = parseBody(await readBody(call.req), 'error decoding patch');
  const current = ctx.store.entry(route.type, route.namespace, route.name as string);
  if (!current) throw notFound(route.type, route.name as string);
  const original = JSON.parse(current.json) as unknown;
  let patched: unknown;
  if (media === patchContentTypes.json) patched = applyJsonPatch(original, patch);
  else if (media === patchContentTypes.merge) patched = applyMergePatch(original, patch);
  else patched = applyStrategicMergePatch(original, patch, route.type.kind);
  if (!isRecord(patched) || !isRecord(patched['metadata']))
    throw badRequest('the patched object is not a valid object: it must be a JSON object with metadata');
  checkMetadataTypes(patched['metadata']);
  checkPatchedUid(route.type, route.name as string, original, patched);
  const warnings = checkUnknownFields(call.url, route.type, patched);
  const obj = patched as KubeObject;
  checkIdentity(call, obj);
  checkSignerPermission(call, obj);
  const entry = ctx.store.updateEntry(route.type, obj, {
    target: (route.subresource ?? 'main') as WriteTarget,
    dryRun: dryRunOf(url),
  });
  sendJson(res, 200, entry.json, warningHeaders(warnings));
}

async function deleteOptionsOf(call: Call): Promise<{ uid?: string; resourceVersion?: string }> {
  const body = await readBody(call.req);
  if (body.length === 0) return {};
  const options =
    mediaTypeOf(call.req) === protobufMediaType
      ? decodeProtobuf(body)
      : parseBody(body, "couldn't get version/kind; json parse error");
  if (!isRecord(options)) throw badRequest('DeleteOptions: expected a JSON object');
  const pre = isRecord(options['preconditions']) ? options['preconditions'] : {};
  return {
    ...(typeof pre['uid'] === 'string' ? { uid: pre['uid'] } : {}),
    ...(typeof pre['resourceVersion'] === 'string' ? { resourceVersion: pre['resourceVersion'] } : {}),
  };
}

async function serveDelete(call: Call): Promise<void> {
  const { route, ctx, res, url } = call;
  const preconditions = await deleteOptionsOf(call);
  const entry = ctx.store.deleteEntry(route.type, route.namespace, route.name as string, preconditions, {
    dryRun: dryRunOf(url),
  });
  // Pods and objects held by finalizers come back as objects; everything else as a success Status.
  if (route.type.plural === 'pods' || entry.object.metadata.deletionTimestamp) {
    sendJson(res, 200, entry.json);
  } else {
    sendJson(res, 200, success(route.type, route.name as string, entry.object.metadata.uid ?? ''));
  }
}

async function serveDeleteCollection(call: Call): Promise<void> {
  const { route, ctx, res, url } = call;
  await deleteOptionsOf(call);
  const dryRun = dryRunOf(url);
  const filter = objectFilterOf(
    route.type,
    url.searchParams.get('labelSelector'),
    url.searchParams.get('fieldSelector'),
  );
  const deleted: StoredEntry[] = [];
  for (const entry of ctx.store.snapshot(route.type, route.namespace)) {
    if (!matchesFilter(filter, entry.object)) continue;
    const { name, namespace } = entry.object.metadata;
    deleted.push(ctx.store.deleteEntry(route.type, namespace, name as string, {}, { dryRun }));
  }
  sendJson(res, 200, listJson(route.type, deleted, ctx.store.resourceVersion).join(''));
}

function serveGet(call: Call, entry: StoredEntry | undefined): void {
  if (!entry) throw notFound(call.route.type, call.route.name as string);
  if (wantsTable(call.req.headers.accept)) {
    sendJson(call.res, 200, tableJson(call.route.type, [entry], call.ctx.store.resourceVersion));
  } else {
    sendJson(call.res, 200, entry.json);
  }
}

async function serveResource(call: Call): Promise<void> {
  const { route, verb, ctx } = call;
  if (!verb) throw methodNotAllowed();
  checkScope(route, verb);
  const plan = ctx.faults.plan(route.type.plural, verb, route.namespace);
  await applyFaults(plan, verb);
  if (plan.error) {
    // An afterCommit fault: the write happens (whatever its own outcome), the client sees the error.
    await serveVerb({ ...call, res: lostAnswer() }, plan).catch(() => undefined);
    throw plan.error;
  }
  return serveVerb(call, plan);
}

async function serveVerb(call: Call, plan: FaultPlan): Promise<void> {
  const { route, verb, ctx } = call;
  const entry =
    verb === 'get' ? ctx.store.entry(route.type, route.namespace, route.name as string) : undefined;
  // A create is authorized once its body is decoded: node rules look at the name inside it.
  if (verb !== 'create') authorize(call, entry?.object);
  switch (verb) {
    case 'get':
      return serveGet(call, entry);
    case 'list':
      return serveList(call, plan);
    case 'watch':
      return serveWatchCall(call, plan);
    case 'create':
      return serveCreate(call);
    case 'update':
      return serveUpdate(call);
    case 'patch':
      return servePatch(call);
    case 'delete':
      return serveDelete(call);
    default:
      return serveDeleteCollection(call);
  }
}

/** The document a discovery or OpenAPI path serves. */
function infoDocument(
  req: IncomingMessage,
  route: InfoRoute,
  ctx: HandlerContext,
): object | Buffer | undefined {
  switch (route.path) {
    case '/api':
      return coreApiVersions(ctx.serverAddress());
    case '/apis':
      return apiGroupList();
    case '/apis/group':
      return apiGroupOf(route.group as string);
    case '/resources':
      return apiResourceList(route.group as string, route.version as string);
    case '/openapi/v2':
      return (req.headers.accept ?? '').includes('protobuf') ? openApiProtobuf() : openApiJson();
    default:
      return undefined;
  }
}

function serveInfo(req: IncomingMessage, res: ServerResponse, route: InfoRoute, ctx: HandlerContext): void {
  if (req.method !== 'GET' && req.method !== 'HEAD') throw methodNotAllowed();
  const doc = infoDocument(req, route, ctx);
  if (doc === undefined) throw unknownPath();
  if (Buffer.isBuffer(doc)) {
    // Go's mime parser rejects the '@' in the protobuf media type, so the apiserver labels it octet-stream.
    res.writeHead(200, { 'Content-Type': 'application/octet-stream', 'Content-Length': doc.length });
    res.end(doc);
  } else {
    sendJson(res, 200, doc);
  }
}

/** `/metrics`: for callers allowed to get it (cluster admins, or a grant naming `/metrics`), as in the apiserver. */
async function serveMetrics(res: ServerResponse, user: SimUser, ctx: HandlerContext): Promise<void> {
  if (!ctx.authorizer.decide({ user, verb: 'get', group: '', resource: '/metrics' }).allowed) {
    throw forbidden(`forbidden: User "${user.name}" cannot get path "/metrics"`);
  }
  const { text, contentType } = await ctx.metrics.exposition();
  res.writeHead(200, { 'Content-Type': contentType, 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
}

function servePublic(res: ServerResponse, path: string): void {
  if (path === '/version') {
    sendJson(res, 200, versionInfo());
    return;
  }
  res.writeHead(200, { 'Content-Type': 'text/plain; charset=utf-8', 'X-Content-Type-Options': 'nosniff' });
  res.end('ok');
}

/** Creates the request listener of the simulated API server. */
export function createRequestHandler(
  ctx: HandlerContext,
): (req: IncomingMessage, res: ServerResponse) => void {
  return (req, res) => {
    const started = Date.now();
    let user = '';
    let labels: RequestLabels | undefined;
    res.once('finish', () => {
      ctx.metrics.record(
        labels ?? nonResourceLabels(req.method ?? '', req.url?.split('?')[0] ?? ''),
        res.statusCode,
      );
      ctx.logger.debug(
        {
          method: req.method,
          path: req.url?.split('?')[0],
          code: res.statusCode,
          user,
          ms: Date.now() - started,
        },
        'apiserver request',
      );
    });
    const handle = async () => {
      let url: URL;
      try {
        url = new URL(req.url ?? '/', 'https://apiserver.invalid');
      } catch {
        throw badRequest('the request URL is malformed');
      }
      const path = url.pathname.replace(/\/+$/, '') || '/';
      if (publicPaths.has(path) || /^\/(healthz|livez|readyz)\//.test(path)) {
        servePublic(res, path);
        return;
      }
      const caller = ctx.authenticator.authenticate(req.headers.authorization, req.socket as TLSSocket);
      user = caller.name;
      if (path === '/metrics') {
        await serveMetrics(res, caller, ctx);
        return;
      }
      const route = routeOf(url.pathname);
      if (route.kind === 'info') {
        serveInfo(req, res, route, ctx);
        return;
      }
      const verb = verbOf(req.method ?? '', route, url);
      labels = resourceLabels(
        req.method ?? '',
        route,
        verb,
        mediaTypeOf(req),
        url.searchParams.getAll('dryRun').includes('All'),
      );
      await serveResource({ req, res, url, user: caller, ctx, route, verb });
    };
    handle().catch((err: unknown) => sendError(res, err, ctx.logger));
  };
}
