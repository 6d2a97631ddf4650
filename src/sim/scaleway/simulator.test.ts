import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { type ScalewaySimulator, startScalewaySimulator } from './simulator.ts';

let sim: ScalewaySimulator;
before(async () => {
  sim = await startScalewaySimulator();
  for (let i = 0; i < 3; i++) sim.addServer({ name: `s${i}`, tags: ['t'], privateIps: [`10.0.0.${i}`] });
});
after(() => sim.close());

const get = (path: string, key = sim.credentials.secretKey) =>
  fetch(`${sim.apiUrl}${path}`, { headers: { 'x-auth-token': key } });

test('the Instance and IPAM APIs answer as the real ones: pages, filters, error types', async () => {
  const page = await get(`/instance/v1/zones/${sim.zone}/servers?per_page=2&page=2&tags=t`);
  assert.equal(page.headers.get('x-total-count'), '3');
  assert.equal(page.headers.get('content-type'), 'application/json');
  assert.equal(((await page.json()) as { servers: unknown[] }).servers.length, 1);
  const tooBig = await get(`/instance/v1/zones/${sim.zone}/servers?per_page=101`);
  assert.equal(tooBig.status, 400);
  assert.equal(((await tooBig.json()) as { type: string }).type, 'invalid_arguments');
  const missing = await get(`/instance/v1/zones/${sim.zone}/servers/00000000-0000-4000-8000-000000000000`);
  assert.deepEqual(await missing.json(), {
    type: 'unknown_resource',
    message: '"instance_server" not found',
  });
  assert.equal((await get(`/instance/v1/zones/${sim.zone}/servers`, 'forged')).status, 401);
  const ips = (await (await get('/ipam/v1/regions/fr-par/ips?is_ipv6=false')).json()) as {
    total_count: number;
    ips: Array<{ address: string }>;
  };
  assert.equal(ips.total_count, 3);
  assert.match(ips.ips[0]?.address ?? '', /^10\.0\.0\.0\/22$/);
  sim.throttleNext(1, 4);
  const throttled = await get(`/instance/v1/zones/${sim.zone}/servers`);
  assert.equal(throttled.status, 429);
  assert.equal(((await throttled.json()) as { reset_seconds: number }).reset_seconds, 4);
});
