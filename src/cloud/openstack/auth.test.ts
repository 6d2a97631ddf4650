import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError } from '../../errors.ts';
import { keystoneAuthBody, keystoneTokensUrl, openstackAuthFromEnv } from './auth.ts';

const base = { OS_AUTH_URL: 'https://keystone.example:5000/v3', OS_REGION_NAME: 'RegionOne' };

test('OS_* password variables become a project-scoped password authentication', () => {
  const auth = openstackAuthFromEnv({
    ...base,
    OS_USERNAME: 'kops',
    OS_PASSWORD: 'secret',
    OS_USER_DOMAIN_NAME: 'users',
    OS_PROJECT_NAME: 'prod',
    OS_DOMAIN_NAME: 'Default',
  });
  assert.equal(auth.region, 'RegionOne');
  assert.equal(auth.endpointInterface, 'public');
  assert.deepEqual(keystoneAuthBody(auth.credentials), {
    auth: {
      identity: {
        methods: ['password'],
        password: { user: { name: 'kops', domain: { name: 'users' }, password: 'secret' } },
      },
      scope: { project: { name: 'prod', domain: { name: 'Default' } } },
    },
  });
});

test('without OS_PROJECT_* a password authentication asks for no scope: nothing fails at start-up', () => {
  // Keystone then issues an unscoped token, with no catalog (provider.test.ts shows what follows).
  const auth = openstackAuthFromEnv({ ...base, OS_USERNAME: 'kops', OS_PASSWORD: 'secret' });
  assert.deepEqual(keystoneAuthBody(auth.credentials), {
    auth: {
      identity: {
        methods: ['password'],
        password: { user: { name: 'kops', domain: { name: 'Default' }, password: 'secret' } },
      },
    },
  });
});

test('an application credential wins over a password, and needs no scope', () => {
  const auth = openstackAuthFromEnv({
    ...base,
    OS_USERNAME: 'kops',
    OS_PASSWORD: 'secret',
    OS_APPLICATION_CREDENTIAL_ID: 'ac1',
    OS_APPLICATION_CREDENTIAL_SECRET: 's3',
    OS_INTERFACE: 'internalURL',
  });
  assert.equal(auth.endpointInterface, 'internal');
  assert.deepEqual(keystoneAuthBody(auth.credentials), {
    auth: {
      identity: { methods: ['application_credential'], application_credential: { id: 'ac1', secret: 's3' } },
    },
  });
});

test('missing or malformed variables are ConfigErrors naming the variable', () => {
  const cases: Array<[Record<string, string>, RegExp]> = [
    [{ OS_REGION_NAME: 'r' }, /OS_AUTH_URL is not set/],
    [{ ...base, OS_AUTH_URL: 'ftp://x' }, /not an http\(s\) URL/],
    [{ OS_AUTH_URL: base.OS_AUTH_URL, OS_USERNAME: 'u', OS_PASSWORD: 'p' }, /OS_REGION_NAME is not set/],
    [{ ...base, OS_USERNAME: 'u' }, /no credentials/],
    [{ ...base, OS_APPLICATION_CREDENTIAL_ID: 'x' }, /OS_APPLICATION_CREDENTIAL_SECRET is not set/],
    [
      { ...base, OS_APPLICATION_CREDENTIAL_NAME: 'x', OS_APPLICATION_CREDENTIAL_SECRET: 's' },
      /needs OS_USERNAME/,
    ],
    [{ ...base, OS_USER_ID: 'u', OS_PASSWORD: 'p', OS_INTERFACE: 'private' }, /OS_INTERFACE "private"/],
  ];
  for (const [env, message] of cases) {
    assert.throws(
      () => openstackAuthFromEnv(env),
      (err: unknown) => err instanceof ConfigError && message.test(err.message),
    );
  }
});

test('the tokens URL is under /v3 whether or not OS_AUTH_URL names the version', () => {
  assert.equal(keystoneTokensUrl('https://k.example:5000').href, 'https://k.example:5000/v3/auth/tokens');
  assert.equal(
    keystoneTokensUrl('https://k.example/identity/v3/').href,
    'https://k.example/identity/v3/auth/tokens',
  );
});
