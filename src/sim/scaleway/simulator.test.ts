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

interface IpamRecord {
  address: string;
  is_ipv6: boolean;
  zone?: string | null;
  resource: { type: string; id: string; name?: string | null; mac_address?: string | null };
  source: { zonal?: string; private_network_id?: string; subnet_id?: string };
}

async function listIps(query: string): Promise<{ total_count: number; ips: IpamRecord[] }> {
  const res = await get(`/ipam/v1/regions/fr-par/ips?${query}`);
  assert.equal(res.status, 200, await res.clone().text());
  return (await res.json()) as { total_count: number; ips: IpamRecord[] };
}

test('the Instance and IPAM APIs answer as the real ones: pages, filters, error types', async () => {
  const page = await get(`/instance/v1/zones/${sim.zone}/servers?per_page=2&page=2&tags=t`);
  assert.equal(page.headers.get('x-total-count'), '3');
  assert.equal(page.headers.get('content-type'), 'application/json');
  assert.equal(((await page.json()) as { servers: unknown[] }).servers.length, 1);
  const tooBig = await get(`/instance/v1/zones/${sim.zone}/servers?per_page=101`);
  assert.equal(tooBig.status, 400);
  assert.equal(((await tooBig.json()) as { type: string }).type, 'invalid_arguments');
  // The Instance API's standard not_found body (scaleway/terraform-provider-scaleway
  // internal/services/ipam/testdata/ipamip-reverse-dns-basic.cassette.yaml, a GET of a deleted volume).
  const missingId = '00000000-0000-4000-8000-000000000000';
  const missing = await get(`/instance/v1/zones/${sim.zone}/servers/${missingId}`);
  assert.equal(missing.status, 404);
  assert.deepEqual(await missing.json(), {
    type: 'not_found',
    message: 'resource is not found',
    resource: 'instance_server',
    resource_id: missingId,
  });
  assert.equal((await get(`/instance/v1/zones/${sim.zone}/servers`, 'forged')).status, 401);
  const ips = await listIps('is_ipv6=false');
  assert.equal(ips.total_count, 3);
  assert.match(ips.ips[0]?.address ?? '', /^10\.0\.0\.0\/22$/);
  sim.throttleNext(1, 4);
  const throttled = await get(`/instance/v1/zones/${sim.zone}/servers`);
  assert.equal(throttled.status, 429);
  assert.equal(((await throttled.json()) as { reset_seconds: number }).reset_seconds, 4);
});

test("IPAM as the real one holds an Instance's addresses: routed public IPs zonal on the server, Private-Network ones regional on its NIC", async () => {
  const server = sim.addServer({
    name: 'both',
    privateIps: ['172.16.8.2', 'fd5f:519c:6d46:2728::2'],
    publicIps: ['51.15.0.9'],
  });
  const nic = server.privateNics[0];
  assert.ok(nic);
  // The Instance record names its NIC (and the NIC's network) and its routed IP's IPAM record.
  const view = (await (await get(`/instance/v1/zones/${sim.zone}/servers/${server.id}`)).json()) as {
    server: {
      routed_ip_enabled: boolean;
      public_ips: Array<{ address: string; ipam_id: string }>;
      private_nics: Array<{ id: string; server_id: string; private_network_id: string; mac_address: string }>;
    };
  };
  assert.equal(view.server.routed_ip_enabled, true);
  assert.deepEqual(
    view.server.private_nics.map((n) => [n.id, n.server_id, n.private_network_id]),
    [[nic.id, server.id, sim.privateNetworkId]],
  );

  // By the server's id: only the public IP; a zonal record, with its zone.
  const byServer = await listIps(`resource_id=${server.id}`);
  assert.deepEqual(byServer.ips, [
    { ...byServer.ips[0], address: '51.15.0.9/32', zone: sim.zone, source: { zonal: sim.zone } },
  ]);
  // As the real IPAM lists a routed IP (ipamip-reverse-dns-basic.cassette.yaml, `resource_type=
  // instance_server`): `source.zonal`, `zone`, and a resource with the server's id and no name or MAC.
  assert.deepEqual(byServer.ips[0]?.resource, {
    type: 'instance_server',
    id: server.id,
    name: null,
    mac_address: null,
  });
  assert.equal(view.server.public_ips[0]?.ipam_id, (byServer.ips[0] as unknown as { id: string }).id);

  // `zonal=<zone>` lists public zoned IPs only: none of the Private Network's.
  const zonal = await listIps(`zonal=${sim.zone}`);
  assert.deepEqual(
    zonal.ips.map((ip) => ip.address),
    ['51.15.0.9/32'],
  );

  // The Private-Network addresses are on the NIC: regional (`zone: null`), sourced from the
  // network's subnet, the MAC address in capitals, as the real IPAM answers
  // (scaleway/terraform-provider-scaleway internal/services/ipam/testdata/
  // data-source-ipamip-instance.cassette.yaml: `"source":{"subnet_id":…}`, `"zone":null`).
  const byNic = await listIps(`resource_type=instance_private_nic&resource_ids=${nic.id}&is_ipv6=false`);
  assert.equal(byNic.total_count, 1);
  const [record] = byNic.ips;
  assert.equal(record?.address, '172.16.8.2/22');
  assert.equal(record?.zone, null);
  assert.deepEqual(Object.keys(record?.source ?? {}), ['subnet_id']);
  assert.match(record?.source.subnet_id ?? '', /^[0-9a-f-]{36}$/);
  assert.notEqual(record?.source.subnet_id, sim.privateNetworkId);
  assert.deepEqual(record?.resource, {
    type: 'instance_private_nic',
    id: nic.id,
    name: 'both',
    mac_address: nic.macAddress.toUpperCase(),
  });
  // IPv4 and IPv6 come from the network's two subnets.
  const v6 = (await listIps(`resource_ids=${nic.id}&is_ipv6=true`)).ips[0];
  assert.ok(v6?.source.subnet_id && v6.source.subnet_id !== record?.source.subnet_id);
  assert.equal((await listIps(`resource_id=${server.id}&resource_type=instance_private_nic`)).total_count, 0);
  assert.equal(
    (await listIps(`resource_ids=${nic.id}&is_ipv6=true`)).ips[0]?.address,
    'fd5f:519c:6d46:2728::2/64',
  );
  // By network: every server's address on it (the three of `before`, then this one's two).
  assert.equal((await listIps(`private_network_id=${sim.privateNetworkId}`)).total_count, 5);
  assert.equal(
    (
      await listIps(
        `resource_types=instance_server&resource_types=instance_private_nic&resource_ids=${server.id}&resource_ids=${nic.id}`,
      )
    ).total_count,
    3,
  );
  assert.equal((await listIps(`project_id=00000000-0000-4000-8000-000000000000`)).total_count, 0);
});

test('IPAM refuses what the real one refuses, and says what it does not model', async () => {
  const refused = async (query: string, status: number) => {
    const res = await get(`/ipam/v1/regions/fr-par/ips?${query}`);
    assert.equal(res.status, status, query);
    return (await res.json()) as { type: string };
  };
  // One source at most; UUIDs; known resource types; booleans.
  assert.equal(
    (await refused(`zonal=${sim.zone}&private_network_id=${sim.privateNetworkId}`, 400)).type,
    'invalid_arguments',
  );
  await refused('resource_id=not-a-uuid', 400);
  await refused('resource_type=instance_nic', 400);
  await refused('is_ipv6=no', 400);
  await refused('page=0', 400);
  // A real filter the simulator does not model is loud, never ignored.
  assert.equal(
    (await refused('subnet_id=00000000-0000-4000-8000-000000000000', 501)).type,
    'not_implemented',
  );
  await refused('order_by=ip_address_asc', 501);
  // A parameter the real API does not have, which it would ignore: refused, so no caller relies on it.
  for (const query of [
    `server_id=${sim.privateNetworkId}`,
    'resource_ids_in=x',
    `private_nic_id=${sim.privateNetworkId}`,
  ]) {
    assert.equal((await refused(query, 501)).type, 'not_implemented', query);
  }
});

test('ignoreIpamFilters: IPAM answers as an API that does not know those parameters', async () => {
  const server = sim.addServer({ name: 'ignored', publicIps: ['51.15.0.20'] });
  sim.ignoreIpamFilters(['resource_id']);
  try {
    const all = await listIps(`resource_id=${server.id}`);
    assert.ok(all.ips.some((ip) => ip.resource.id !== server.id));
    assert.equal((await listIps('resource_id=not-a-uuid')).total_count, all.total_count);
  } finally {
    sim.ignoreIpamFilters([]);
  }
  assert.equal((await listIps(`resource_id=${server.id}`)).total_count, 1);
});
