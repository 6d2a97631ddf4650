/**
 * Who is calling and what they may do: bearer tokens and client certificates for authentication,
 * and "rbac-lite" for authorization — `system:masters` may do everything, nodes get the built-in node
 * rules, everybody else only what `grant()` allowed. Denials read exactly like the real RBAC's.
 */
import type { PeerCertificate, TLSSocket } from 'node:tls';
import { InvalidInputError } from '../../errors.ts';
import { isRecord, type KubeObject, type SimUser } from './objects.ts';
import type { ResourceType } from './resources.ts';
import { forbidden, qualifiedResource, unauthorized } from './status.ts';

/** A permission handed out with `grant()`. */
export interface GrantRule {
  user?: string;
  group?: string;
  /** Verbs such as `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, or `*`. */
  verbs: string[];
  /** Plural resource names, optionally with a subresource (`nodes/status`), or `*`. */
  resources: string[];
  /** Restricts the grant to one namespace; cluster-wide when absent. */
  namespace?: string;
  /** Restricts the grant to these object names. */
  names?: string[];
}

/** What a request asks to do, as the authorizer sees it. */
export interface AccessRequest {
  user: SimUser;
  verb: string;
  group: string;
  resource: string;
  subresource?: string;
  namespace?: string;
  name?: string;
  /** The stored object (or, for a create, the body), when the decision depends on it. */
  object?: KubeObject;
}

/** The authorization mode: `rbac-lite` checks, `allow-all` lets every authenticated caller through. */
export type AuthorizationMode = 'rbac-lite' | 'allow-all';

const nodePrefix = 'system:node:';

/** Recognizes callers by bearer token or by verified client certificate. */
export class Authenticator {
  readonly #tokens = new Map<string, SimUser>();

  /** Registers a bearer token for a user. */
  addToken(token: string, user: SimUser): void {
    this.#tokens.set(token, {
      name: user.name,
      groups: [...user.groups],
      ...(user.uid ? { uid: user.uid } : {}),
    });
  }

  /** The user a bearer token belongs to, if any. */
  userOfToken(token: string): SimUser | undefined {
    return this.#tokens.get(token);
  }

  /** Identifies the caller of a request; no valid credential is 401. */
  authenticate(authorization: string | undefined, socket: TLSSocket): SimUser {
    if (authorization !== undefined) {
      const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization);
      const user = match ? this.#tokens.get(match[1] as string) : undefined;
      if (!user) throw unauthorized();
      return withAuthenticated(user);
    }
    const cert = socket.getPeerCertificate?.();
    if (cert && Object.keys(cert).length > 0) {
      if (!socket.authorized) throw unauthorized();
      return withAuthenticated(identityOfCertificate(cert));
    }
    throw unauthorized();
  }
}

function withAuthenticated(user: SimUser): SimUser {
  return user.groups.includes('system:authenticated')
    ? user
    : { ...user, groups: [...user.groups, 'system:authenticated'] };
}

/** The Kubernetes identity in a client certificate: CN is the user, each O a group. */
export function identityOfCertificate(cert: PeerCertificate): SimUser {
  const organizations = cert.subject.O;
  const groups =
    organizations === undefined ? [] : Array.isArray(organizations) ? organizations : [organizations];
  const name = Array.isArray(cert.subject.CN) ? (cert.subject.CN[0] ?? '') : (cert.subject.CN ?? '');
  return { name, groups };
}

function listIncludes(list: readonly string[], value: string): boolean {
  return list.includes('*') || list.includes(value);
}

/** The node name of a node identity (`system:node:<name>` in `system:nodes`), or undefined. */
export function nodeNameOf(user: SimUser): string | undefined {
  if (!user.name.startsWith(nodePrefix) || !user.groups.includes('system:nodes')) return undefined;
  return user.name.slice(nodePrefix.length) || undefined;
}

const readVerbs = ['get', 'list', 'watch'];
const writeVerbs = ['create', 'update', 'patch'];

/** The built-in permissions of a kubelet (node authorizer and `system:node` roles, reduced). */
function nodeAllows(nodeName: string, req: AccessRequest): boolean {
  // A create names its object only in the body, which the handler passes as `object`.
  const own = (req.name ?? req.object?.metadata.name) === nodeName;
  switch (req.resource) {
    case 'nodes':
      if (!req.subresource) return readVerbs.includes(req.verb) || (writeVerbs.includes(req.verb) && own);
      return req.subresource === 'status' && (req.verb === 'get' || (writeVerbs.includes(req.verb) && own));
    case 'certificatesigningrequests': {
      if (req.subresource) return false;
      if (req.verb === 'create' || req.verb === 'list' || req.verb === 'watch') return true;
      const spec = isRecord(req.object?.['spec']) ? req.object['spec'] : undefined;
      return req.verb === 'get' && spec?.['username'] === `${nodePrefix}${nodeName}`;
    }
    case 'leases':
      return (
        req.namespace === 'kube-node-lease' &&
        own &&
        (req.verb === 'get' || writeVerbs.includes(req.verb) || req.verb === 'delete')
      );
    case 'events':
      return writeVerbs.includes(req.verb);
    case 'pods':
      if (req.subresource === 'status') return req.verb === 'get' || writeVerbs.includes(req.verb);
      return readVerbs.includes(req.verb) && !req.subresource;
    default:
      return false;
  }
}

/** Decides requests under the configured mode. */
export class Authorizer {
  readonly #mode: AuthorizationMode;
  readonly #rules: GrantRule[] = [];

  constructor(mode: AuthorizationMode) {
    this.#mode = mode;
  }

  /** Adds a permission. */
  grant(rule: GrantRule): void {
    if (!rule.user && !rule.group) throw new InvalidInputError('grant() needs a user or a group to grant to');
    this.#rules.push({ ...rule, verbs: [...rule.verbs], resources: [...rule.resources] });
  }

  /** Whether the request is allowed, with the reason a SubjectAccessReview reports. */
  decide(req: AccessRequest): { allowed: boolean; reason: string } {
    if (this.#mode === 'allow-all') return { allowed: true, reason: 'allow-all' };
    if (req.user.groups.includes('system:masters'))
      return { allowed: true, reason: 'member of system:masters' };
    // system:basic-user lets every authenticated caller ask what it may do.
    if (req.resource === 'selfsubjectaccessreviews' && req.verb === 'create') {
      return { allowed: true, reason: 'system:basic-user' };
    }
    const nodeName = nodeNameOf(req.user);
    if (nodeName && nodeAllows(nodeName, req))
      return { allowed: true, reason: `node rules allow node "${nodeName}"` };
    const resource = req.subresource ? `${req.resource}/${req.subresource}` : req.resource;
    for (const rule of this.#rules) {
      if (rule.user && rule.user !== req.user.name) continue;
      if (rule.group && !req.user.groups.includes(rule.group)) continue;
      if (!listIncludes(rule.verbs, req.verb) || !listIncludes(rule.resources, resource)) continue;
      if (rule.namespace && rule.namespace !== req.namespace) continue;
      if (rule.names && (!req.name || !rule.names.includes(req.name))) continue;
      return {
        allowed: true,
        reason: `granted to ${rule.user ? `user "${rule.user}"` : `group "${rule.group}"`}`,
      };
    }
    return { allowed: false, reason: '' };
  }

  /** Throws the real 403 when the request is not allowed. */
  authorize(req: AccessRequest, type: ResourceType): void {
    if (this.decide(req).allowed) return;
    throw forbidden(forbiddenMessage(req, type), type, req.name);
  }
}

/** `nodes "n1" is forbidden: User "x" cannot get resource "nodes" in API group "" at the cluster scope`. */
export function forbiddenMessage(req: AccessRequest, type: ResourceType): string {
  const resource = req.subresource ? `${req.resource}/${req.subresource}` : req.resource;
  const scope = req.namespace ? `in the namespace "${req.namespace}"` : 'at the cluster scope';
  const why = `User "${req.user.name}" cannot ${req.verb} resource "${resource}" in API group "${req.group}" ${scope}`;
  const what = req.name ? `${qualifiedResource(type)} "${req.name}"` : qualifiedResource(type);
  return `${what} is forbidden: ${why}`;
}
