/**
 * The addresses of a Linode instance's identity against what the Linode cloud controller manager
 * puts in the Node's `status.addresses` (linode/linode-cloud-controller-manager
 * cloud/linode/services/instances.go getInstanceAddresses: every `ipv4` entry, private ones as
 * InternalIP and the rest ExternalIP, then `ipv6` with its `/128` cut off as ExternalIP; the label
 * as Hostname). The kubelet asks for each of them in its serving certificate, and the CSR approver
 * approves only addresses of the identity.
 */
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import { assessInstance } from '../../controllers/csr-approver/checks.ts';
import { createLinodeProvider, type LinodeProvider } from './provider.ts';

const cluster = 'prod.example.com';
let server: Server;
let provider: LinodeProvider;

// GET /v4/linode/instances/{id} (the SDK may ask /v4beta/): `ipv4` a list of strings, `ipv6` one
// string with its `/128` (the CCM trims that suffix from linodego's Instance.IPv6), or null.
const instance = {
  id: 4101,
  label: 'nodes-us-ord-1',
  status: 'running',
  region: 'us-ord',
  type: 'g6-standard-2',
  ipv4: ['172.105.10.7', '192.168.140.7'],
  ipv6: '2600:3c06::f03c:94ff:fe11:2233/128',
  tags: [`kops.k8s.io/cluster:${cluster}`, 'kops.k8s.io/instance-group:nodes-us-ord'],
};

before(async () => {
  server = createServer((req, res) => {
    const body =
      req.method === 'GET' && /^\/v4(beta)?\/linode\/instances\/4101$/.test(req.url ?? '')
        ? JSON.stringify(instance)
        : JSON.stringify({ errors: [{ reason: 'Not found' }] });
    res.writeHead(body.includes('errors') ? 404 : 200, { 'content-type': 'application/json' });
    res.end(body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  provider = createLinodeProvider({
    clusterName: cluster,
    origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    token: 'test-token',
    api: { retries: 0, retryDelayMs: 1, maxRetryWaitMs: 1 },
  });
});
after(async () => {
  await provider.close?.();
  await new Promise((resolve) => server.close(resolve));
});

test('a Linode instance’s SLAAC IPv6 address is one of its addresses, as the CCM reports it', async () => {
  const id = `linode://${instance.id}`;
  const result = (await provider.nodeIdentifier.identify([id])).get(id);
  assert.ok(result?.ok, JSON.stringify(result));
  assert.deepEqual(result.identity.addresses, [
    { type: 'InternalIP', address: '192.168.140.7' },
    { type: 'ExternalIP', address: '172.105.10.7' },
    { type: 'ExternalIP', address: '2600:3c06::f03c:94ff:fe11:2233' },
    { type: 'Hostname', address: 'nodes-us-ord-1' },
  ]);
  // The kubelet's serving CSR built from the CCM's addresses is approved.
  const verdict = assessInstance(
    {
      nodeName: 'nodes-us-ord-1',
      serving: true,
      dnsNames: ['nodes-us-ord-1'],
      ipAddresses: ['192.168.140.7', '172.105.10.7', '2600:3c06::f03c:94ff:fe11:2233'],
    },
    result.identity,
  );
  assert.equal(verdict.action, 'approve', JSON.stringify(verdict));
});
