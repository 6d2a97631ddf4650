import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { eventually } from '../../net/testing.ts';
import { type AzureSimulator, startAzureSimulator } from '../../sim/azure/simulator.ts';
import { simAzureClient } from '../../testing/azure-client.ts';
import { outcomeWithin, silentServer } from '../../testing/silent-server.ts';
import { AzureClient, azureError, azureOperationOf } from './client.ts';

let sim: AzureSimulator;

before(async () => {
  sim = await startAzureSimulator({ pageSize: 1 });
  sim.world.seedKopsCluster('c.example.com', [{ name: 'nodes', count: 2 }]);
});
after(() => sim.close());

function client(endpoint = sim.armEndpoint): AzureClient {
  return simAzureClient(sim, { endpoint });
}

test('ARM request URLs are named after their SDK operation, never after a resource', () => {
  const base = 'https://management.azure.com/subscriptions/s/resourceGroups/rg/providers';
  const names: [string, string][] = [
    [
      `${base}/Microsoft.Compute/virtualMachineScaleSets/n.c/virtualMachines?api-version=1`,
      'virtualMachineScaleSetVMs.list',
    ],
    [
      `${base}/Microsoft.Compute/virtualMachineScaleSets/n.c/virtualMachines/3`,
      'virtualMachineScaleSetVMs.get',
    ],
    [
      `${base}/Microsoft.Compute/virtualMachineScaleSets/n.c/virtualMachines/3/networkInterfaces/n.c`,
      'networkInterfaces.getVirtualMachineScaleSetNetworkInterface',
    ],
    [
      `${base}/Microsoft.Compute/virtualMachineScaleSets/n.c/networkInterfaces`,
      'networkInterfaces.listVirtualMachineScaleSetNetworkInterfaces',
    ],
    [
      `${base}/Microsoft.Compute/virtualMachineScaleSets/n.c/publicipaddresses`,
      'publicIPAddresses.listVirtualMachineScaleSetPublicIPAddresses',
    ],
    [`${base}/Microsoft.Compute/virtualMachineScaleSets`, 'virtualMachineScaleSets.list'],
    [`${base}/Microsoft.Compute/virtualMachines/vm1`, 'virtualMachines.get'],
    [`${base}/Microsoft.Network/networkInterfaces/vm1`, 'networkInterfaces.get'],
    [`${base}/Microsoft.Network/publicIPAddresses`, 'publicIPAddresses.list'],
    [`${base}/Microsoft.Storage/storageAccounts/x`, 'other'],
  ];
  for (const [url, name] of names) assert.equal(azureOperationOf(url), name, url);
});

test('ARM failures map to typed errors; 401/403 carry their status so they are never taken for a verdict', () => {
  const rest = (statusCode: number, headers: Record<string, string> = {}) =>
    Object.assign(new Error('x'), {
      statusCode,
      code: 'C',
      response: { headers: { get: (n: string) => headers[n] } },
    });
  assert.equal(azureError(rest(404), 'get').name, 'NotFoundError');
  const throttled = azureError(rest(429, { 'retry-after': '7' }), 'get');
  assert.equal(throttled.name, 'RateLimitedError');
  assert.equal(throttled.details?.['retryAfterSeconds'], 7);
  assert.equal(azureError(rest(403), 'get').details?.['status'], 403);
  assert.equal(azureError(rest(503), 'get').name, 'UnavailableError');
  assert.equal(azureError(new Error('socket hang up'), 'get').name, 'UnavailableError');
});

test('network interface reads stay inside our resource group, and nextLinks inside our ARM endpoint', async () => {
  await assert.rejects(
    client().getNic(
      `/subscriptions/${sim.world.subscriptionId}/resourceGroups/other/providers/Microsoft.Network/networkInterfaces/x`,
    ),
    { name: 'InvalidInputError' },
  );
  assert.equal((await client().listScaleSetNics('nodes.c.example.com')).length, 2);
  // Reached as localhost, the simulator's nextLinks (127.0.0.1) are another origin: not followed.
  const elsewhere = client(sim.armEndpoint.replace('127.0.0.1', 'localhost'));
  await assert.rejects(elsewhere.listScaleSetNics('nodes.c.example.com'), /nextLink outside/);
});

test('an ARM endpoint that accepts the connection and never answers: each request ends at its timeout, its connection closed', async () => {
  const silent = await silentServer();
  const endpoint = `https://127.0.0.1:${new URL(silent.endpoint).port}`;
  const hung = new AzureClient({ ...sim.clientOptions, endpoint, maxRetries: 0, requestTimeoutMs: 300 });
  try {
    const started = Date.now();
    const outcome = await outcomeWithin(hung.listScaleSets(), 5_000);
    assert.ok(!outcome.pending, 'still pending 5 s after its 300 ms timeout');
    assert.ok(Date.now() - started < 2_000, `failed after ${Date.now() - started} ms`);
    assert.equal((outcome.error as Error).name, 'UnavailableError', String(outcome.error));
    assert.equal(await eventually(() => silent.open(), 0), 0, 'the request still holds its connection');
  } finally {
    silent.close();
  }
});

test('closing the client ends a call waiting on a silent ARM endpoint at once, and refuses the next without a request', async () => {
  const silent = await silentServer();
  const endpoint = `https://127.0.0.1:${new URL(silent.endpoint).port}`;
  const hung = new AzureClient({ ...sim.clientOptions, endpoint, maxRetries: 3, requestTimeoutMs: 60_000 });
  try {
    const waiting = outcomeWithin(hung.listScaleSets(), 5_000);
    assert.equal(await eventually(() => silent.accepted(), 1), 1, 'the call never reached the endpoint');
    const closed = Date.now();
    hung.close();
    const outcome = await waiting;
    assert.ok(!outcome.pending, 'still pending 5 s after the client was closed');
    assert.ok(Date.now() - closed < 1_000, `ended ${Date.now() - closed} ms after close`);
    assert.equal((outcome.error as Error).name, 'UnavailableError', String(outcome.error));
    assert.equal(await eventually(() => silent.open(), 0), 0, 'the aborted call still holds its connection');
    await assert.rejects(hung.listScaleSets(), { name: 'UnavailableError' });
    assert.equal(silent.accepted(), 1, 'a call after close reached the endpoint (or the first was retried)');
  } finally {
    silent.close();
  }
});
