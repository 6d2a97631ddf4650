import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ForbiddenError, InvalidInputError, UnauthenticatedError } from '../../errors.ts';
import { type AccessRequest, Authenticator, Authorizer, forbiddenMessage, nodeNameOf } from './auth.ts';
import { resourceTypeByName } from './resources.ts';

const nodeUser = { name: 'system:node:n1', groups: ['system:nodes'] };
const ask = (req: Partial<AccessRequest>): AccessRequest => ({
  user: nodeUser,
  verb: 'get',
  group: '',
  resource: 'nodes',
  ...req,
});

test('authenticates registered bearer tokens only', () => {
  const authn = new Authenticator();
  authn.addToken('t1', { name: 'alice', groups: ['devs'] });
  const socket = { getPeerCertificate: () => ({}), authorized: false } as never;
  assert.deepEqual(authn.authenticate('Bearer t1', socket), {
    name: 'alice',
    groups: ['devs', 'system:authenticated'],
  });
  assert.throws(() => authn.authenticate('Bearer nope', socket), UnauthenticatedError);
  assert.throws(() => authn.authenticate('Basic YTpi', socket), UnauthenticatedError);
  assert.throws(() => authn.authenticate(undefined, socket), UnauthenticatedError);
});

test('gives nodes the built-in node rules', () => {
  const authz = new Authorizer('rbac-lite');
  assert.equal(nodeNameOf(nodeUser), 'n1');
  assert.equal(nodeNameOf({ name: 'system:node:n1', groups: [] }), undefined);
  assert.equal(authz.decide(ask({ verb: 'list' })).allowed, true);
  assert.equal(authz.decide(ask({ verb: 'patch', name: 'n1', subresource: 'status' })).allowed, true);
  assert.equal(authz.decide(ask({ verb: 'patch', name: 'n2' })).allowed, false);
  assert.equal(authz.decide(ask({ verb: 'delete', name: 'n1' })).allowed, false);
  assert.equal(
    authz.decide(ask({ verb: 'update', resource: 'leases', namespace: 'kube-node-lease', name: 'n1' }))
      .allowed,
    true,
  );
  assert.equal(authz.decide(ask({ verb: 'list', resource: 'secrets', namespace: 'default' })).allowed, false);
});

test('grants by user, group, namespace and name', () => {
  const authz = new Authorizer('rbac-lite');
  const bob = { name: 'bob', groups: ['ops'] };
  authz.grant({ group: 'ops', verbs: ['get', 'list'], resources: ['configmaps'], namespace: 'kube-system' });
  authz.grant({ user: 'bob', verbs: ['*'], resources: ['nodes/status'], names: ['n1'] });
  assert.equal(
    authz.decide({ user: bob, verb: 'list', group: '', resource: 'configmaps', namespace: 'kube-system' })
      .allowed,
    true,
  );
  assert.equal(
    authz.decide({ user: bob, verb: 'list', group: '', resource: 'configmaps', namespace: 'default' })
      .allowed,
    false,
  );
  assert.equal(
    authz.decide({
      user: bob,
      verb: 'update',
      group: '',
      resource: 'nodes',
      subresource: 'status',
      name: 'n1',
    }).allowed,
    true,
  );
  assert.equal(
    authz.decide({ user: bob, verb: 'update', group: '', resource: 'nodes', name: 'n1' }).allowed,
    false,
  );
  assert.throws(() => authz.grant({ verbs: ['get'], resources: ['nodes'] }), InvalidInputError);
  assert.equal(
    new Authorizer('allow-all').decide({ user: bob, verb: 'delete', group: '', resource: 'nodes' }).allowed,
    true,
  );
});

test('denies with the RBAC sentence', () => {
  const authz = new Authorizer('rbac-lite');
  const req = {
    user: { name: 'x', groups: [] },
    verb: 'list',
    group: 'coordination.k8s.io',
    resource: 'leases',
    namespace: 'ns',
  };
  const leases = resourceTypeByName('leases')!;
  assert.equal(
    forbiddenMessage(req, leases),
    'leases.coordination.k8s.io is forbidden: User "x" cannot list resource "leases" in API group "coordination.k8s.io" in the namespace "ns"',
  );
  assert.throws(() => authz.authorize(req, leases), ForbiddenError);
});
