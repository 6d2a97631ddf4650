import assert from 'node:assert/strict';
import { test } from 'node:test';
import { KopsError } from '../../errors.ts';
import { routeOf } from './routes.ts';
import { statusOf } from './status.ts';

const resource = (path: string) => {
  const route = routeOf(path);
  assert.equal(route.kind, 'resource', path);
  return route.kind === 'resource'
    ? {
        plural: route.type.plural,
        ns: route.namespace,
        name: route.name,
        sub: route.subresource,
        watch: route.watchPath,
      }
    : undefined;
};

test('routes core and group resources, namespaced or not', () => {
  assert.deepEqual(resource('/api/v1/nodes/n1/status'), {
    plural: 'nodes',
    ns: undefined,
    name: 'n1',
    sub: 'status',
    watch: false,
  });
  assert.deepEqual(resource('/api/v1/namespaces/kube-system/pods/p'), {
    plural: 'pods',
    ns: 'kube-system',
    name: 'p',
    sub: undefined,
    watch: false,
  });
  assert.deepEqual(resource('/api/v1/namespaces/default/status'), {
    plural: 'namespaces',
    ns: undefined,
    name: 'default',
    sub: 'status',
    watch: false,
  });
  assert.deepEqual(resource('/apis/coordination.k8s.io/v1/namespaces/a/leases'), {
    plural: 'leases',
    ns: 'a',
    name: undefined,
    sub: undefined,
    watch: false,
  });
  assert.deepEqual(resource('/api/v1/watch/namespaces/a/pods'), {
    plural: 'pods',
    ns: 'a',
    name: undefined,
    sub: undefined,
    watch: true,
  });
  assert.deepEqual(
    resource('/apis/certificates.k8s.io/v1/certificatesigningrequests/c%3A1/approval')?.name,
    'c:1',
  );
});

test('routes discovery paths', () => {
  assert.deepEqual(routeOf('/api'), { kind: 'info', path: '/api' });
  assert.deepEqual(routeOf('/apis/certificates.k8s.io'), {
    kind: 'info',
    path: '/apis/group',
    group: 'certificates.k8s.io',
  });
  assert.deepEqual(routeOf('/api/v1'), { kind: 'info', path: '/resources', group: '', version: 'v1' });
  assert.deepEqual(routeOf('/openapi/v2'), { kind: 'info', path: '/openapi/v2' });
});

test('refuses what names no resource', () => {
  const code = (path: string) => {
    try {
      routeOf(path);
    } catch (err) {
      assert.ok(err instanceof KopsError);
      return statusOf(err).code;
    }
    return 0;
  };
  assert.equal(code('/api/v1/widgets'), 404);
  assert.equal(code('/api/v2/nodes'), 404);
  assert.equal(code('/api/v1/namespaces/a/nodes'), 404);
  assert.equal(code('/api/v1/nodes/n1/proxy'), 404);
  assert.equal(code('/api/v1/nodes/n1/status/extra'), 404);
  assert.equal(code('/api/v1/nodes/%E0%A4%A'), 400);
});
