import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { request as httpsRequestOf } from 'node:https';
import { after, before, beforeEach, test } from 'node:test';
import { TimeoutError, UnavailableError } from '../errors.ts';
import {
  drained,
  type EgressProxySim,
  proxiedUrl,
  refuseDirectLookups,
  startEgressProxy,
  startStalledProxy,
} from '../sim/egress-proxy.ts';
import { egressAgent, egressFetch, proxyFor } from './egress-proxy.ts';
import { httpsRequest } from './https-client.ts';
import { listenOnLoopback } from './loopback.ts';

const via = (url: string, env: Record<string, string>) => proxyFor(new URL(url), env)?.href;
const P = 'http://proxy.corp:3128/';

test('the proxy variables: upper case wins, per scheme, no fallback, a bare host is http://', () => {
  assert.equal(via('https://ec2.amazonaws.com', { https_proxy: 'proxy.corp:3128' }), P);
  assert.equal(
    via('https://x.com', { HTTPS_PROXY: 'http://up:1', https_proxy: 'http://low:2' }),
    'http://up:1/',
  );
  assert.equal(via('https://x.com', { HTTPS_PROXY: '', https_proxy: 'http://low:2' }), 'http://low:2/');
  assert.equal(via('https://x.com', { HTTP_PROXY: P }), undefined);
  assert.equal(via('http://x.com', { HTTP_PROXY: P }), P);
  assert.equal(via('http://x.com', { https_proxy: P }), undefined);
  assert.equal(via('https://x.com', { ALL_PROXY: P }), undefined);
  assert.equal(via('https://x.com', { HTTPS_PROXY: 'socks5://s:1080' }), undefined);
});

test('NO_PROXY as Go matches it: *, host and subdomains, .domain, *.domain, ports, IPs, CIDRs', () => {
  const env = (no: string) => ({ https_proxy: P, NO_PROXY: no });
  assert.equal(via('https://anything.example', env('*')), undefined);
  assert.equal(via('https://api.internal.c.example.com', env('c.example.com')), undefined);
  assert.equal(via('https://c.example.com', env('c.example.com')), undefined);
  assert.equal(via('https://xc.example.com', env('c.example.com')), P);
  assert.equal(via('https://c.example.com', env('.c.example.com')), P);
  assert.equal(via('https://a.c.example.com', env('.c.example.com')), undefined);
  assert.equal(via('https://a.c.example.com', env('*.c.example.com')), undefined);
  assert.equal(via('https://s3.amazonaws.com', env('s3.amazonaws.com:443')), undefined);
  assert.equal(via('https://s3.amazonaws.com:8443', env('s3.amazonaws.com:443')), P);
  assert.equal(via('https://S3.AMAZONAWS.com', env(' s3.amazonaws.com ,other')), undefined);
  assert.equal(via('https://100.64.0.1', env('100.64.0.0/10')), undefined);
  assert.equal(via('https://100.128.0.1', env('100.64.0.0/10')), P);
  assert.equal(via('https://[fd00::5]', env('fd00::/8')), undefined);
  assert.equal(via('https://10.0.0.7', env('10.0.0.7')), undefined);
  assert.equal(via('https://10.0.0.7:6443', env('10.0.0.7:443')), P);
  // A CIDR matches addresses, never a name (Go resolves nothing to decide).
  assert.equal(via('https://api.c.example.com', env('10.0.0.0/8')), P);
  // kops' NO_PROXY, as assignProxy builds it.
  const kops = env(
    '127.0.0.1,localhost,cluster.local,api.c.example.com,c.example.com,100.64.0.1,100.64.0.0/10,169.254.169.254,172.20.0.0/16',
  );
  assert.equal(via('https://100.64.0.1:443', kops), undefined);
  assert.equal(via('https://api.internal.c.example.com', kops), undefined);
  assert.equal(via('https://kubernetes.default.svc.cluster.local', kops), undefined);
  assert.equal(via('https://ec2.us-east-1.amazonaws.com', kops), P);
});

test('loopback and the metadata services never go through the proxy, whatever NO_PROXY says', () => {
  const env = { HTTPS_PROXY: P, HTTP_PROXY: P };
  for (const url of [
    'http://169.254.169.254/latest/api/token',
    'http://[fd00:ec2::254]/latest/meta-data',
    'http://metadata.google.internal/computeMetadata/v1',
    'http://metadata.google.internal./computeMetadata/v1',
    'http://169.254.42.42/openstack/latest/meta_data.json',
    'https://localhost:6443',
    'https://127.0.0.1:6443',
    'https://[::1]:6443',
  ]) {
    assert.equal(via(url, env), undefined, url);
  }
});

let proxy: EgressProxySim;
let restoreLookups: () => void;
let origin: { url: string; close(): Promise<void> };
const saved = { ...process.env };

before(async () => {
  restoreLookups = refuseDirectLookups();
  proxy = await startEgressProxy();
  origin = await listenOnLoopback(createServer((req, res) => res.end(`hello ${req.headers.host}`)));
});
after(async () => {
  restoreLookups();
  await proxy.close();
  await origin.close();
});
beforeEach(() => {
  for (const name of ['HTTPS_PROXY', 'https_proxy', 'HTTP_PROXY', 'http_proxy', 'NO_PROXY', 'no_proxy']) {
    if (saved[name] === undefined) delete process.env[name];
    else process.env[name] = saved[name];
  }
  proxy.tunnels.length = 0;
  proxy.refuse = () => false;
});

const get = (url: string, agent?: false) =>
  httpsRequest({
    url: new URL(url),
    timeoutMs: 5_000,
    maxBodyBytes: 1024,
    ...(agent === false ? { agent } : {}),
  });

test('https-client: a name only the proxy knows is reached through a CONNECT tunnel', async () => {
  const target = proxiedUrl(origin.url, 'api');
  // Without the proxy the name does not resolve: the test cannot pass by reaching it directly.
  await assert.rejects(get(target), UnavailableError);
  process.env['HTTP_PROXY'] = proxy.url;
  const answer = await get(target);
  assert.equal(answer.body.toString(), `hello ${new URL(target).host}`);
  assert.deepEqual(proxy.tunnels, [new URL(target).host]);
  // A connection of its own is tunnelled too.
  assert.equal((await get(target, false)).status, 200);
  assert.equal(proxy.tunnels.length, 2);
});

test('NO_PROXY excludes by host, domain suffix and CIDR; loopback is reached directly', async () => {
  process.env['http_proxy'] = proxy.url;
  // Names of this test's own: the shared agent keeps the connections of the test before.
  const target = proxiedUrl(origin.url, 'state');
  process.env['no_proxy'] = 'state.proxied.test';
  await assert.rejects(get(target), UnavailableError);
  process.env['no_proxy'] = '.proxied.test';
  await assert.rejects(get(target), UnavailableError);
  process.env['no_proxy'] = 'other.test,10.0.0.0/8';
  assert.equal((await get(target)).status, 200);
  assert.equal(proxy.tunnels.length, 1);
  // 127.0.0.1 is loopback (never proxied) and, like a CIDR match, reached directly.
  process.env['no_proxy'] = '127.0.0.0/8';
  assert.equal((await get(origin.url)).status, 200);
  assert.equal(proxy.tunnels.length, 1);
});

test('a proxy that refuses the tunnel is an unavailable dependency naming the proxy, not a crash', async () => {
  process.env['HTTP_PROXY'] = `http://user:secret@${new URL(proxy.url).host}`;
  proxy.refuse = () => true;
  const err = await get(proxiedUrl(origin.url, 'refused')).catch((e: unknown) => e);
  assert.ok(err instanceof UnavailableError, String(err));
  assert.match(
    err.message,
    /egress proxy http:\/\/127\.0\.0\.1:\d+ did not open a tunnel to refused\.proxied\.test:\d+: .*403/,
  );
  assert.doesNotMatch(err.message, /secret/);
  // A proxy that is down is the same kind of failure.
  process.env['HTTP_PROXY'] = 'http://127.0.0.1:1';
  await assert.rejects(get(proxiedUrl(origin.url, 'down')), UnavailableError);
});

/** How long `promise` took to settle, and its error. */
async function settle(promise: Promise<unknown>): Promise<{ ms: number; err: unknown }> {
  const start = Date.now();
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  return { ms: Date.now() - start, err };
}

test('an abort while the tunnel opens rejects at once and closes the connection to the proxy', async () => {
  const stalled = await startStalledProxy();
  try {
    process.env['HTTPS_PROXY'] = stalled.url;
    const target = 'https://stalled.proxied.test/';
    // https-client: the caller's signal.
    const one = await settle(
      httpsRequest({
        url: new URL(target),
        timeoutMs: 60_000,
        maxBodyBytes: 100,
        signal: AbortSignal.timeout(100),
      }),
    );
    assert.ok(one.ms < 1_000, `httpsRequest took ${one.ms} ms`);
    assert.equal((one.err as Error).name, 'AbortError', String(one.err));
    await drained(stalled.open, 1_000);
    // https-client: its own deadline.
    const two = await settle(httpsRequest({ url: new URL(target), timeoutMs: 100, maxBodyBytes: 100 }));
    assert.ok(two.err instanceof TimeoutError, String(two.err));
    await drained(stalled.open, 1_000);
    // egressFetch: the request's signal, with the signal's reason, as fetch.
    const three = await settle(egressFetch(target, { signal: AbortSignal.timeout(100) }));
    assert.ok(three.ms < 1_000, `egressFetch took ${three.ms} ms`);
    assert.equal((three.err as Error).name, 'TimeoutError', String(three.err));
    await drained(stalled.open, 1_000);
    // A client that destroys its request itself (as the SDKs do on their timeouts) closes the tunnel too.
    const req = httpsRequestOf(target, { agent: egressAgent('https:') });
    req.on('error', () => undefined);
    req.end();
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.equal(stalled.open.size, 1);
    req.destroy();
    await drained(stalled.open, 1_000);
  } finally {
    await stalled.close();
  }
});
