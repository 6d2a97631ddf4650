import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Authenticator, Authorizer } from './auth.ts';
import { resourceTypeByName } from './resources.ts';
import { review } from './reviews.ts';

const authn = new Authenticator();
authn.addToken('good', { name: 'system:node:n1', groups: ['system:nodes'] });
const authz = new Authorizer('rbac-lite');
const caller = { name: 'carol', groups: ['system:authenticated'] };
const body = (kind: string, apiVersion: string, spec: Record<string, unknown>) => ({
  apiVersion,
  kind,
  metadata: {},
  spec,
});

test('TokenReview reports the token owner, or no authentication', () => {
  const type = resourceTypeByName('tokenreviews')!;
  const ok = review(
    type,
    body('TokenReview', 'authentication.k8s.io/v1', { token: 'good' }),
    caller,
    authn,
    authz,
  );
  assert.deepEqual(ok['status'], {
    authenticated: true,
    user: { username: 'system:node:n1', groups: ['system:nodes', 'system:authenticated'] },
    audiences: [],
  });
  const bad = review(
    type,
    body('TokenReview', 'authentication.k8s.io/v1', { token: 'bad' }),
    caller,
    authn,
    authz,
  );
  assert.deepEqual(bad['status'], { user: {}, error: 'invalid bearer token' });
});

test('SubjectAccessReview asks about the named user, SelfSubjectAccessReview about the caller', () => {
  const sar = resourceTypeByName('subjectaccessreviews')!;
  const attributes = { resourceAttributes: { verb: 'get', resource: 'nodes', group: '' } };
  const forNode = review(
    sar,
    body('SubjectAccessReview', 'authorization.k8s.io/v1', {
      user: 'system:node:n1',
      groups: ['system:nodes'],
      ...attributes,
    }),
    caller,
    authn,
    authz,
  );
  assert.equal((forNode['status'] as { allowed: boolean }).allowed, true);
  const self = resourceTypeByName('selfsubjectaccessreviews')!;
  const forCaller = review(
    self,
    body('SelfSubjectAccessReview', 'authorization.k8s.io/v1', attributes),
    caller,
    authn,
    authz,
  );
  assert.equal((forCaller['status'] as { allowed: boolean }).allowed, false);
});
