/**
 * The addresses of a Scaleway server's identity against what the Scaleway cloud controller manager
 * puts in the Node's `status.addresses` (scaleway/scaleway-cloud-controller-manager
 * scaleway/instances.go instanceAddresses): the server's `hostname` as Hostname; its public IPv4
 * as ExternalIP with `<server id>.pub.instances.scw.cloud` as ExternalDNS; the legacy `private_ip`
 * as InternalIP with `<server id>.priv.instances.scw.cloud` as InternalDNS. The kubelet asks for each
 * in its serving certificate, and the CSR approver approves only names and addresses of the identity.
 */

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { Instancev1 } from '@scaleway/sdk-instance';
import { assessInstance } from '../../controllers/csr-approver/checks.ts';
import { type ScalewaySimulator, startScalewaySimulator } from '../../sim/scaleway/simulator.ts';
import { simScalewayClients } from '../../testing/scaleway-clients.ts';
import type { ScalewayClients } from './client.ts';
import { ScalewayNodeIdentifier } from './node-identifier.ts';
import { identityOfServer } from './server.ts';

const cluster = 'prod.example.com';
const tags = [`noprefix=kops.k8s.io/cluster=${cluster}`, 'noprefix=kops.k8s.io/instance-group=nodes-a'];
let sim: ScalewaySimulator;
let clients: ScalewayClients;

before(async () => {
  sim = await startScalewaySimulator();
  clients = simScalewayClients(sim);
});
after(() => sim.close());

test('a server with a public IPv4 has its pub.instances.scw.cloud name, as the CCM reports it', async () => {
  const server = sim.addServer({ name: 'nodes-a-1', tags, publicIps: ['51.15.0.9', '2001:bc8:1::1'] });
  const providerID = `scaleway://instance/fr-par-1/${server.id}`;
  const identifier = new ScalewayNodeIdentifier({ clients, clusterName: cluster, coalesceWindowMs: 1 });
  const result = (await identifier.identify([providerID])).get(providerID);
  assert.ok(result?.ok, JSON.stringify(result));
  const dnsName = `${server.id}.pub.instances.scw.cloud`;
  assert.ok(
    result.identity.addresses.some((a) => a.type === 'ExternalDNS' && a.address === dnsName),
    JSON.stringify(result.identity.addresses),
  );
  const verdict = assessInstance(
    { nodeName: 'nodes-a-1', serving: true, dnsNames: ['nodes-a-1', dnsName], ipAddresses: ['51.15.0.9'] },
    result.identity,
  );
  assert.equal(verdict.action, 'approve', JSON.stringify(verdict));
});

test('the server’s hostname and its legacy private IP’s priv.instances.scw.cloud name are its own', () => {
  // A GetServer answer as the SDK unmarshals it (scaleway-sdk-js packages/clients/src/api/instance/v1
  // types.gen.ts Server: `hostname`, `privateIp`, `publicIps[].family`/`provisioningMode`).
  const id = '11111111-2222-4333-8444-555555555555';
  const server = {
    id,
    name: 'nodes-a-2',
    hostname: 'nodes-a-2-host',
    state: 'running',
    project: 'project-1',
    zone: 'fr-par-1',
    tags,
    privateIp: '10.68.4.9',
    publicIps: [{ id: 'ip-1', address: '51.15.0.10', family: 'inet', provisioningMode: 'dhcp' }],
  } as unknown as Instancev1.Server;
  const identity = identityOfServer(`scaleway://instance/fr-par-1/${id}`, server, cluster, 'project-1');
  assert.ok(!(identity instanceof Error), String(identity));
  const dnsNames = ['nodes-a-2-host', `${id}.pub.instances.scw.cloud`, `${id}.priv.instances.scw.cloud`];
  const verdict = assessInstance(
    { nodeName: 'nodes-a-2', serving: true, dnsNames, ipAddresses: ['51.15.0.10', '10.68.4.9'] },
    identity,
  );
  assert.equal(verdict.action, 'approve', JSON.stringify(verdict));
});
