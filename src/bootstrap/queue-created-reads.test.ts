/**
 * A name this replica created in the last 10 s is read past the queue's read budget while the CSR
 * watch lacks it (not current, or lagging), but once a second at most: its requester knows the name
 * (it is deterministic), and polling it with wait=0 in a loop made one read of the API server per
 * poll (review s15b finding 1: 200 polls, 200 reads).
 */
import assert from 'node:assert/strict';
import { request as httpsRequest } from 'node:https';
import { after, before, test } from 'node:test';
import { CertificatesV1Api } from '@kubernetes/client-node';
import { KopsError } from '../errors.ts';
import { silentLogger } from '../log.ts';
import { createCa } from '../pki/ca.ts';
import { parseCsr } from '../pki/csr.ts';
import { buildCsrPem } from '../pki/csr-build.ts';
import { generateKey } from '../pki/keys.ts';
import { type SimApiServer, startApiServer } from '../sim/apiserver/index.ts';
import { lagWatches } from '../testing/lagging-watches.ts';
import type { BootstrapContext } from './context.ts';
import { pollRequest } from './native-handler.ts';
import { CsrQueue, defaultQueueReadBudget } from './queue.ts';
import type { BootstrapRequest, NodeFacts } from './types.ts';

const key = generateKey();
const facts: NodeFacts = {
  nodeName: 'node-q',
  dnsNames: [],
  ipAddresses: ['10.1.2.3'],
  evidence: { verified: 'false' },
};
const request: BootstrapRequest = {
  id: 'r1',
  body: Buffer.from('{}'),
  claimedNodeName: 'node-q',
  certificates: {
    kubelet: parseCsr(
      buildCsrPem(key, { subject: { commonName: 'system:node:node-q', organizations: ['system:nodes'] } }),
    ),
    'kubelet-server': parseCsr(
      buildCsrPem(generateKey(), {
        subject: { commonName: 'node-q', organizations: [] },
        ipAddresses: ['10.1.2.3'],
      }),
    ),
  },
  proof: { kind: 'none' },
  remoteAddress: '10.1.2.3',
  receivedAt: new Date(),
};

let sim: SimApiServer;
before(async () => {
  sim = await startApiServer();
});
after(() => sim.close());

async function csrGets(): Promise<number> {
  const options: { headers?: Record<string, string> } = {};
  await sim.kubeConfig().applyToHTTPSOptions(options);
  const text = await new Promise<string>((resolve, reject) => {
    httpsRequest(new URL('/metrics', sim.url), { ...options, ca: sim.caCertificate }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c));
      res.on('end', () => resolve(body));
    })
      .on('error', reject)
      .end();
  });
  return text
    .split('\n')
    .filter(
      (l) => l.startsWith('apiserver_request_total{') && l.includes('resource="certificatesigningrequests"'),
    )
    .filter((l) => l.includes('verb="GET"') && l.includes('scope="resource"') && l.includes('subresource=""'))
    .reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
}

test("attack: polling a name created here, in a loop, while the watch lacks it costs one read outside the budget, then the budget, then the queue's own 429", async () => {
  const kubeConfig = sim.kubeConfig();
  // Not started: its watch is not current (listing, reconnecting), as during an API-server hiccup.
  const queue = new CsrQueue({
    certificates: kubeConfig.makeApiClient(CertificatesV1Api),
    kubeConfig,
    ca: createCa(),
  });
  const context = { queue, logger: silentLogger } as unknown as BootstrapContext;
  const { name } = await queue.submit(request, facts);
  const before = await csrGets();
  const polls = 10 * defaultQueueReadBudget.burst;
  const statuses: number[] = [];
  for (let i = 0; i < polls; i++) {
    // The queue's own 429 is thrown to the HTTP edge, which answers it with its status.
    const status = await pollRequest(context, name, '0', new AbortController().signal).then(
      (answer) => answer.status,
      (err: unknown) => {
        if (err instanceof KopsError && err.reasonCode === 'queue-read-budget') return err.httpStatus;
        throw err;
      },
    );
    statuses.push(status);
  }
  const reads = (await csrGets()) - before;
  // Within the same second: one read of its own, then the budget's burst, then 429.
  assert.ok(reads <= 1 + defaultQueueReadBudget.burst + 2, `${reads} reads for ${polls} polls`);
  assert.equal(statuses.filter((s) => s === 202).length, reads);
  assert.ok(
    statuses.slice(reads).every((s) => s === 429),
    JSON.stringify(statuses.slice(reads, reads + 5)),
  );
});

test('a name created here, polled twice within a second while the watch is current but lagging and the budget is spent, is told to wait, never 404', async () => {
  // The same request as the test before, under another CA: its CSR goes first.
  for (const csr of sim.store.list('certificatesigningrequests'))
    sim.store.delete('certificatesigningrequests', undefined, csr.metadata.name as string);
  const restore = lagWatches(sim, 5_000);
  const kubeConfig = sim.kubeConfig();
  const now = 1_000_000;
  const queue = new CsrQueue({
    certificates: kubeConfig.makeApiClient(CertificatesV1Api),
    kubeConfig,
    ca: createCa(),
    now: () => now,
    // One read, regained only after 100 s: spent for the whole test.
    readBudget: { burst: 1, perSecond: 0.01 },
  });
  queue.start();
  try {
    for (let i = 0; i < 500 && !queue.isCurrent(); i++) await new Promise((r) => setTimeout(r, 20));
    assert.ok(queue.isCurrent(), 'the CSR watch never became current');
    restore();
    const context = { queue, logger: silentLogger } as unknown as BootstrapContext;
    const { name } = await queue.submit(request, facts);
    // Someone else's poll of a made-up id spends the budget.
    await assert.rejects(queue.lookup(`kops-bootstrap-${'0'.repeat(40)}`), { name: 'NotFoundError' });
    const poll = () =>
      pollRequest(context, name, '0', new AbortController().signal).then(
        (answer) => answer.status,
        (err: unknown) => (err instanceof KopsError ? `${err.httpStatus} ${err.reasonCode}` : String(err)),
      );
    assert.equal(await poll(), 202, 'the first poll reads it outside the budget');
    // The same node polls again within the second: the watch (current, lagging) does not hold it,
    // and its "not there" is not taken for a request this replica has just created.
    assert.equal(await poll(), '429 queue-read-budget');
  } finally {
    restore();
    for (const csr of sim.store.list('certificatesigningrequests'))
      sim.store.delete('certificatesigningrequests', undefined, csr.metadata.name as string);
    await queue.stop();
  }
});
