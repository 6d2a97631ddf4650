/** Turns a request path into what it addresses: a discovery document or a resource operation. */
import { type ResourceType, resourceTypeOf } from './resources.ts';
import { badRequest, unknownPath } from './status.ts';

/** A request for a resource: the type, and the namespace, name and subresource when given. */
export interface ResourceRoute {
  kind: 'resource';
  type: ResourceType;
  namespace?: string;
  name?: string;
  subresource?: string;
  /** The deprecated `/watch/` path prefix was used. */
  watchPath: boolean;
}

/** A non-resource path (discovery, health, version, OpenAPI). */
export interface InfoRoute {
  kind: 'info';
  path: string;
  group?: string;
  version?: string;
}

/** What a request path addresses. */
export type Route = ResourceRoute | InfoRoute;

function decodeSegments(path: string): string[] {
  try {
    return path
      .split('/')
      .filter((s) => s !== '')
      .map((s) => decodeURIComponent(s));
  } catch {
    throw badRequest(`the request path ${JSON.stringify(path)} is not valid percent-encoding`);
  }
}

/** Parses the path of a request; paths that name nothing the server serves are a 404. */
export function routeOf(pathname: string): Route {
  const segments = decodeSegments(pathname);
  let group: string;
  let rest: string[];
  if (segments[0] === 'api') {
    if (segments.length === 1) return { kind: 'info', path: '/api' };
    group = '';
    rest = segments.slice(1);
  } else if (segments[0] === 'apis') {
    if (segments.length === 1) return { kind: 'info', path: '/apis' };
    if (segments.length === 2) return { kind: 'info', path: '/apis/group', group: segments[1] as string };
    group = segments[1] as string;
    rest = segments.slice(2);
  } else {
    return { kind: 'info', path: `/${segments.join('/')}` };
  }
  const version = rest[0] as string;
  if (rest.length === 1) return { kind: 'info', path: '/resources', group, version };
  let parts = rest.slice(1);
  const watchPath = parts[0] === 'watch';
  if (watchPath) parts = parts.slice(1);
  let namespace: string | undefined;
  // `namespaces/<ns>/<resource>` addresses a namespaced resource; `namespaces/<ns>/status` is the namespace's own.
  if (
    parts[0] === 'namespaces' &&
    parts.length >= 3 &&
    resourceTypeOf(group, version, parts[2] as string)?.namespaced
  ) {
    namespace = parts[1];
    parts = parts.slice(2);
  }
  const [plural, name, subresource, ...extra] = parts;
  const type = plural === undefined ? undefined : resourceTypeOf(group, version, plural);
  if (!type || extra.length > 0) throw unknownPath();
  if (namespace !== undefined && !type.namespaced) throw unknownPath();
  if (subresource !== undefined && !type.subresources.includes(subresource)) throw unknownPath();
  if (name === '') throw unknownPath();
  return {
    kind: 'resource',
    type,
    watchPath,
    ...(namespace !== undefined ? { namespace } : {}),
    ...(name !== undefined ? { name } : {}),
    ...(subresource !== undefined ? { subresource } : {}),
  };
}
