/**
 * The one not-the-api rule (api-answer.ts) where each cloud applies it, and the id and region
 * spellings that keep a node's own input from reaching it.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Errors } from '@scaleway/sdk-client';
import { resolveRegion } from './aws/region.ts';
import { dropletIds } from './digitalocean/droplets.ts';
import { openstackError } from './openstack/http.ts';
import { scalewayError } from './scaleway/client.ts';

test('OpenStack: a 4xx other than 400/404 (a proxy 405, 413, 422 page) without OpenStack’s body is not-the-api; with it, the status speaks', () => {
  for (const status of [405, 409, 413, 422]) {
    const page = openstackError('servers.get', {
      status,
      headers: {},
      body: Buffer.from('<html><body>nope</body></html>'),
    });
    assert.equal(page.kind, 'unavailable', `${status}`);
    assert.equal(page.details?.['reason'], 'not-the-api', `${status}`);
  }
  const own = openstackError('servers.get', {
    status: 422,
    headers: {},
    body: Buffer.from('{"badRequest": {"code": 422, "message": "nope"}}'),
  });
  assert.equal(own.kind, 'invalid');
});

test("Scaleway: the API gateway's own message-only body (400 Unknown zone in path, scaleway-cli#4378) stays a verdict, not a fault", () => {
  // A node chooses the zone of its providerID (any xx-yyy-N): the gateway answers an unknown one with
  // {"message":"Unknown zone in path"} (34 bytes, no `type`). Requiring both message and type, as
  // docs/clouds.md words it, would let any node turn its own denial into a 503.
  const gateway = scalewayError(
    'list servers',
    new Errors.ScalewayError(400, { message: 'Unknown zone in path' }),
  );
  assert.equal(gateway.kind, 'invalid', gateway.message);
  const typeOnly = scalewayError('get server', new Errors.ScalewayError(404, { type: 'not_found' }));
  assert.equal(typeOnly.kind, 'not-found', typeOnly.message);
});

test('DigitalOcean: a droplet id above int64 is refused as Hetzner’s is', () => {
  assert.equal(dropletIds.parse('9223372036854775807', 'id'), '9223372036854775807');
  assert.throws(() => dropletIds.parse('9223372036854775808', 'id'));
});

test('AWS: the EUSC partition’s region passes the region lookup, not only the spelling check', async () => {
  assert.equal(await resolveRegion('eusc-de-east-1'), 'eusc-de-east-1');
});
