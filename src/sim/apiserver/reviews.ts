/** The review resources, answered from the server's own authentication and authorization. */
import type { Authenticator, Authorizer } from './auth.ts';
import { isRecord, type KubeObject, type SimUser } from './objects.ts';
import type { ResourceType } from './resources.ts';

/** TokenReview and SubjectAccessReview, answered from the server's own authentication and RBAC. */
export function review(
  type: ResourceType,
  obj: KubeObject,
  caller: SimUser,
  authenticator: Authenticator,
  authorizer: Authorizer,
): Record<string, unknown> {
  const spec = isRecord(obj['spec']) ? obj['spec'] : {};
  const base = {
    kind: obj.kind,
    apiVersion: obj.apiVersion,
    metadata: { ...obj.metadata, creationTimestamp: null },
    spec,
  };
  if (type.plural === 'tokenreviews') {
    const token = typeof spec['token'] === 'string' ? spec['token'] : '';
    const user = authenticator.userOfToken(token);
    if (!user) return { ...base, status: { user: {}, error: 'invalid bearer token' } };
    const groups = user.groups.includes('system:authenticated')
      ? user.groups
      : [...user.groups, 'system:authenticated'];
    return {
      ...base,
      status: {
        authenticated: true,
        user: { username: user.name, ...(user.uid ? { uid: user.uid } : {}), groups },
        audiences: spec['audiences'] ?? [],
      },
    };
  }
  const attributes = isRecord(spec['resourceAttributes']) ? spec['resourceAttributes'] : undefined;
  // A SelfSubjectAccessReview asks about the caller (`kubectl auth can-i`).
  const subject: SimUser =
    type.plural === 'selfsubjectaccessreviews'
      ? caller
      : {
          name: typeof spec['user'] === 'string' ? spec['user'] : '',
          groups: Array.isArray(spec['groups']) ? spec['groups'].map(String) : [],
        };
  if (!attributes) {
    const allowed = subject.groups.includes('system:masters');
    return { ...base, status: { allowed, ...(allowed ? { reason: 'member of system:masters' } : {}) } };
  }
  const str = (key: string) => (typeof attributes[key] === 'string' ? (attributes[key] as string) : '');
  const decision = authorizer.decide({
    user: subject,
    verb: str('verb'),
    group: str('group'),
    resource: str('resource'),
    ...(str('subresource') ? { subresource: str('subresource') } : {}),
    ...(str('namespace') ? { namespace: str('namespace') } : {}),
    ...(str('name') ? { name: str('name') } : {}),
  });
  return {
    ...base,
    status: { allowed: decision.allowed, ...(decision.reason ? { reason: decision.reason } : {}) },
  };
}
