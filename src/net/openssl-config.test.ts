import assert from 'node:assert/strict';
import { test } from 'node:test';
import { sessionTicketsWarning } from './openssl-config.ts';

test('no warning when Node got an OpenSSL configuration by flag, NODE_OPTIONS or OPENSSL_CONF', () => {
  assert.equal(sessionTicketsWarning(['--openssl-config=/app/deploy/openssl.cnf'], {}), undefined);
  assert.equal(sessionTicketsWarning(['--openssl-config', 'x.cnf'], {}), undefined);
  assert.equal(
    sessionTicketsWarning([], { NODE_OPTIONS: '--max-old-space-size=512 --openssl-config=x.cnf' }),
    undefined,
  );
  assert.equal(sessionTicketsWarning([], { OPENSSL_CONF: '/etc/ssl/openssl.cnf' }), undefined);
});

test('a process without one is told that tickets are on and how to turn them off', () => {
  const warning = sessionTicketsWarning(['--cpu-prof', '--openssl-configure'], {
    NODE_OPTIONS: '--inspect',
    OPENSSL_CONF: '',
  });
  assert.match(
    warning ?? '',
    /^TLS session tickets are on: start Node with --openssl-config=deploy\/openssl\.cnf/,
  );
});
