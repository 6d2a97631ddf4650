/**
 * The bootstrap server on several worker processes (src/bootstrap/workers.ts): real workers on one
 * loopback port, real TLS, the real replay guard in the simulated API server. A connection's worker
 * is known from `/cluster-info`, which the test entry (workers-testing.ts) answers with its pid, so
 * each test drives two different workers on purpose rather than hoping the kernel spreads them.
 */
import assert from 'node:assert/strict';
import { Agent, request } from 'node:https';
import { after, before, describe, test } from 'node:test';
import { connect, type TLSSocket } from 'node:tls';
import { Counter, Registry } from 'prom-client';
import { eventually } from '../net/testing.ts';
import { bundlePem, type CertificateAuthority, createCa } from '../pki/ca.ts';
import { buildCsrPem } from '../pki/csr-build.ts';
import { generateKey, privateKeyPem } from '../pki/keys.ts';
import { nativeApiVersion } from '../protocol/bootstrap-api.ts';
import { type SimApiServer, startApiServer } from '../sim/apiserver/index.ts';
import { servingCertificate } from './server.ts';
import { type ServingWorkers, type ServingWorkersOptions, startServingWorkers } from './workers.ts';
import type { TestWorkerSpec } from './workers-testing.ts';

interface Reply {
  status: number;
  text: string;
}

function call(
  workers: ServingWorkers,
  ca: CertificateAuthority,
  agent: Agent,
  path: string,
  post?: { body: string; authorization: string },
): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = request(
      `${workers.url}${path}`,
      {
        method: post ? 'POST' : 'GET',
        agent,
        ca: bundlePem(ca),
        headers: post ? { 'content-type': 'application/json', authorization: post.authorization } : {},
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString() }));
      },
    );
    req.on('error', reject);
    req.end(post?.body);
  });
}

/**
 * Every sample of a counter or histogram in an exposition, by series (`name{labels}`): what
 * Prometheus expects never to go down while the process serves.
 */
function monotonicSamples(exposition: string): Map<string, number> {
  const monotonic = new Set<string>();
  const samples = new Map<string, number>();
  for (const line of exposition.split('\n')) {
    const type = /^# TYPE (\S+) (counter|histogram)$/.exec(line);
    if (type) monotonic.add(type[1] as string);
    const sample = /^(([a-zA-Z_:][\w:]*?)(_bucket|_sum|_count)?(\{.*\})?) (\S+)$/.exec(line);
    if (!sample) continue;
    const [, series, base, suffix] = sample as unknown as [string, string, string, string | undefined];
    if (monotonic.has(suffix ? base : (series.split('{')[0] as string)))
      samples.set(series, Number(sample[5]));
  }
  return samples;
}

/** The approvals series of the test policy in a scrape. */
const approvedSeries = 'kops_controller_bootstrap_requests_total{policy="test-spend-once",verdict="approve"}';

/** A kubelet certificate request for `name`, as the native API takes it. */
function certificatesBody(name: string): string {
  const csr = buildCsrPem(generateKey(), {
    subject: { commonName: `system:node:${name}`, organizations: ['system:nodes'] },
  });
  return JSON.stringify({ apiVersion: nativeApiVersion, certificateSigningRequests: { kubelet: csr } });
}

describe('bootstrap workers', () => {
  let sim: SimApiServer;
  let ca: CertificateAuthority;
  const agents: Agent[] = [];

  before(async () => {
    sim = await startApiServer();
    ca = createCa();
  });
  after(async () => {
    for (const agent of agents) agent.destroy();
    await sim.close();
  });

  function start(overrides: Partial<ServingWorkersOptions> & { spec?: Partial<TestWorkerSpec> } = {}) {
    const spec: TestWorkerSpec = {
      kubeconfig: sim.kubeconfig(),
      ca: { bundle: bundlePem(ca), key: privateKeyPem(ca.signer.key) },
      ...overrides.spec,
    };
    return startServingWorkers({
      count: 2,
      entry: new URL('./workers-testing.ts', import.meta.url).href,
      listen: '127.0.0.1:0',
      tls: servingCertificate(ca, { name: 'kops-controller', ipAddresses: ['127.0.0.1'] }),
      rateLimit: { burst: 1_000, ratePerSecond: 1_000 },
      ...overrides,
      spec,
    });
  }

  /**
   * One kept-alive connection per worker: new connections until two different workers answered (the
   * others closed, and released by the primary, before it returns). Also says how many requests it made.
   */
  async function connectionPerWorker(
    workers: ServingWorkers,
  ): Promise<{ agents: Agent[]; requests: number }> {
    const byPid = new Map<string, Agent>();
    let requests = 0;
    for (; requests < 64 && byPid.size < 2; requests++) {
      const agent = new Agent({ keepAlive: true, maxSockets: 1 });
      agents.push(agent);
      const pid = (await call(workers, ca, agent, '/cluster-info')).text;
      if (byPid.has(pid)) {
        agent.destroy();
        await eventually(() => workers.openConnections(), byPid.size);
      } else byPid.set(pid, agent);
    }
    assert.equal(byPid.size, 2, 'the kernel never gave a connection to the second worker');
    assert.deepEqual([...byPid.keys()].map(Number).sort(), workers.pids().sort());
    return { agents: [...byPid.values()], requests };
  }

  /**
   * Certifies `names` on one worker, over one kept-alive connection: that connection and the worker's
   * pid (its /cluster-info answers with it).
   */
  async function certifyOnOneWorker(workers: ServingWorkers, names: readonly string[]) {
    const [first] = (await connectionPerWorker(workers)).agents as [Agent, Agent];
    const pid = Number((await call(workers, ca, first, '/cluster-info')).text);
    for (const name of names) {
      const reply = await call(workers, ca, first, '/v1/certificates', {
        body: certificatesBody(name),
        authorization: `Bearer ${name}`,
      });
      assert.equal(reply.status, 200, reply.text);
    }
    return { first, pid };
  }

  test('a proof replayed to two workers is refused by one of them', async () => {
    const workers = await start();
    try {
      const [first, second] = (await connectionPerWorker(workers)).agents as [Agent, Agent];
      const authorization = 'Bearer spent-once';
      const replies = await Promise.all([
        call(workers, ca, first, '/v1/certificates', { body: certificatesBody('node-a'), authorization }),
        call(workers, ca, second, '/v1/certificates', { body: certificatesBody('node-b'), authorization }),
      ]);
      const statuses = replies.map((reply) => reply.status).sort();
      assert.deepEqual(statuses, [200, 403], JSON.stringify(replies));
      assert.match(replies.find((reply) => reply.status === 403)?.text ?? '', /already spent/);
    } finally {
      await workers.close();
    }
  });

  test('a queued request is found by its poll on another worker', async () => {
    const workers = await start();
    try {
      const [first, second] = (await connectionPerWorker(workers)).agents as [Agent, Agent];
      const submitted = await call(workers, ca, first, '/v1/certificates', {
        body: certificatesBody('node-q'),
        authorization: 'Bearer queue-me',
      });
      assert.equal(submitted.status, 202, submitted.text);
      const { requestId, poll } = JSON.parse(submitted.text) as { requestId: string; poll: string };
      // The other worker learns of the CSR from its own watch of the API server (bounded wait).
      let polled = await call(workers, ca, second, `${poll}?wait=0`);
      for (let i = 0; i < 100 && polled.status === 404; i++) {
        await new Promise((resolve) => setTimeout(resolve, 50));
        polled = await call(workers, ca, second, `${poll}?wait=0`);
      }
      assert.equal(polled.status, 202, polled.text);
      assert.equal((JSON.parse(polled.text) as { requestId: string }).requestId, requestId);
    } finally {
      await workers.close();
    }
  });

  test('the per-source rate limit holds across workers', async () => {
    const burst = 20;
    const workers = await start({ rateLimit: { burst, ratePerSecond: 0.001 } });
    try {
      const { agents: pair, requests } = await connectionPerWorker(workers);
      const replies: { worker: number; status: number }[] = [];
      for (let i = 0; i < 2 * burst; i++) {
        const worker = i % 2;
        replies.push({
          worker,
          status: (await call(workers, ca, pair[worker] as Agent, '/cluster-info')).status,
        });
      }
      // One bucket for the source, whichever worker answers: the burst is spent once in all.
      const allowed = replies.filter((reply) => reply.status === 200).length;
      assert.equal(requests + allowed, burst);
      assert.ok(replies.every((reply) => reply.status === 200 || reply.status === 429));
      for (const worker of [0, 1]) {
        assert.ok(replies.some((reply) => reply.worker === worker && reply.status === 429));
      }
    } finally {
      await workers.close();
    }
  });

  test('the per-source connection cap holds across workers', async () => {
    const workers = await start({ limits: { maxConnectionsPerSource: 2 } });
    const sockets: TLSSocket[] = [];
    try {
      const [first, second] = (await connectionPerWorker(workers)).agents as [Agent, Agent];
      // Two connections held, one on each worker: the agents keep them alive.
      assert.equal(workers.openConnections(), 2);
      const third = connect({ host: '127.0.0.1', port: workers.address.port, ca: bundlePem(ca) });
      sockets.push(third);
      const outcome = await new Promise<string>((resolve) => {
        third.once('secureConnect', () => resolve('connected'));
        third.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
      });
      assert.equal(outcome, 'ECONNRESET');
      // Both held connections still serve.
      assert.equal((await call(workers, ca, first, '/healthz')).status, 200);
      assert.equal((await call(workers, ca, second, '/healthz')).status, 200);
    } finally {
      for (const socket of sockets) socket.destroy();
      await workers.close();
    }
  });

  test('/metrics sums the workers and the primary: one set of series', async () => {
    const registry = new Registry();
    const workers = await start({ registry });
    try {
      // The primary's own metric of a name the workers have, registered after the workers started
      // (as the operations port's are): registered as usual, and summed with theirs.
      const own = new Counter({
        name: 'kops_controller_bootstrap_requests_total',
        help: 'the primary counts too',
        labelNames: ['policy', 'verdict'],
        registers: [registry],
      });
      own.inc({ policy: 'test-spend-once', verdict: 'approve' });
      const [first, second] = (await connectionPerWorker(workers)).agents as [Agent, Agent];
      const replies = await Promise.all([
        call(workers, ca, first, '/v1/certificates', {
          body: certificatesBody('node-c'),
          authorization: 'Bearer c',
        }),
        call(workers, ca, second, '/v1/certificates', {
          body: certificatesBody('node-d'),
          authorization: 'Bearer d',
        }),
      ]);
      assert.deepEqual(
        replies.map((reply) => reply.status),
        [200, 200],
      );
      const text = await registry.metrics();
      assert.equal(text.match(/^# TYPE kops_controller_bootstrap_requests_total /gm)?.length, 1);
      assert.match(
        text,
        /^kops_controller_bootstrap_requests_total\{policy="test-spend-once",verdict="approve"\} 3$/m,
      );
      // The workers' gauges summed: the connections the primary counts for the caps.
      assert.match(
        text,
        new RegExp(
          `^kops_controller_connections_open\\{server="bootstrap"\\} ${workers.openConnections()}$`,
          'm',
        ),
      );
    } finally {
      await workers.close();
    }
  });

  test('counters and histograms do not go back when a worker is killed and replaced', async () => {
    const registry = new Registry();
    const workers = await start({ registry });
    try {
      const { first, pid } = await certifyOnOneWorker(workers, ['node-k1', 'node-k2']);
      const before = monotonicSamples(await registry.metrics());
      assert.equal(before.get(approvedSeries), 2);
      assert.equal(before.get('kops_controller_bootstrap_issue_seconds_count'), 2);
      first.destroy();
      process.kill(pid, 'SIGKILL');
      await eventually(() => workers.pids().length === 2 && !workers.pids().includes(pid), true, 20_000);
      assert.equal(workers.pids().length, 2, 'the killed worker was replaced');
      const after = monotonicSamples(await registry.metrics());
      const behind = [...before].filter(([series, value]) => (after.get(series) ?? 0) < value);
      assert.deepEqual(behind, [], 'series lower after the kill than before it');
      assert.equal(after.get(approvedSeries), 2);
    } finally {
      await workers.close();
    }
  });

  test('a worker killed between scrapes: what it counted reaches /metrics through its periodic report', async () => {
    const registry = new Registry();
    const metricsReportMs = 20;
    const workers = await start({ registry, metricsReportMs });
    try {
      const { first, pid } = await certifyOnOneWorker(workers, ['node-r1']);
      // No scrape: only the worker's own reports (fifty periods) tell the primary what it counted.
      await new Promise((resolve) => setTimeout(resolve, 50 * metricsReportMs));
      first.destroy();
      process.kill(pid, 'SIGKILL');
      await eventually(() => workers.pids().length === 2 && !workers.pids().includes(pid), true, 20_000);
      const after = monotonicSamples(await registry.metrics());
      assert.equal(after.get(approvedSeries), 1);
      assert.equal(after.get('kops_controller_bootstrap_issue_seconds_count'), 1);
    } finally {
      await workers.close();
    }
  });

  test('a worker that does not answer a scrape in time counts with its last report', async () => {
    const registry = new Registry();
    const workers = await start({ registry });
    let stopped: number | undefined;
    try {
      const { pid } = await certifyOnOneWorker(workers, ['node-s1']);
      assert.equal(monotonicSamples(await registry.metrics()).get(approvedSeries), 1);
      // Stopped, it answers nothing: the scrape waits for it in vain, then uses what it said last.
      process.kill(pid, 'SIGSTOP');
      stopped = pid;
      assert.equal(monotonicSamples(await registry.metrics()).get(approvedSeries), 1);
    } finally {
      if (stopped) process.kill(stopped, 'SIGCONT');
      await workers.close();
    }
  });

  test('hostile HTTP is answered by a worker as by a single process: bytes after a request do not take its answer, a half-closed client gets its answer, a non-plain path is 400', async () => {
    const workers = await start();
    /** Writes `text` on a new TLS connection (then half-closes, with `halfClose`); what came back. */
    const raw = (text: string, halfClose = false) =>
      new Promise<string[]>((resolve) => {
        let received = '';
        const socket = connect({ host: '127.0.0.1', port: workers.address.port, ca: bundlePem(ca) }, () => {
          socket.write(text);
          if (halfClose) socket.end();
        });
        socket.on('data', (chunk: Buffer) => (received += chunk.toString('latin1')));
        socket.on('error', () => undefined);
        socket.on('close', () => resolve(received.match(/HTTP\/1\.1 \d{3}/g) ?? []));
      });
    const request = (target: string, name: string, tail = '', headers = '') => {
      const payload = certificatesBody(name);
      return (
        `POST ${target} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer ${name}\r\n` +
        `${headers}Content-Length: ${Buffer.byteLength(payload)}\r\n\r\n${payload}${tail}`
      );
    };
    try {
      assert.deepEqual(await raw(request('/v1/certificates', 'node-h1', 'NOT HTTP\r\n\r\n')), [
        'HTTP/1.1 200',
        'HTTP/1.1 400',
      ]);
      assert.deepEqual(await raw(request('/v1/certificates', 'node-h2'), true), ['HTTP/1.1 200']);
      const close = 'Connection: close\r\n';
      assert.deepEqual(await raw(request('//x/v1/certificates', 'node-h3', '', close)), ['HTTP/1.1 400']);
      assert.equal(await eventually(() => workers.openConnections(), 0), 0);
    } finally {
      await workers.close();
    }
  });

  test('a worker that dies is replaced, and the server keeps serving', async () => {
    const workers = await start();
    try {
      const [dead, alive] = workers.pids() as [number, number];
      process.kill(dead, 'SIGKILL');
      await eventually(() => workers.pids().includes(dead), false);
      const agent = new Agent({ keepAlive: false });
      agents.push(agent);
      // Served by the worker left while the other is replaced.
      assert.equal((await call(workers, ca, agent, '/healthz')).status, 200);
      await eventually(() => workers.pids().length, 2, 20_000);
      assert.ok(workers.pids().includes(alive));
      await connectionPerWorker(workers);
    } finally {
      await workers.close();
    }
  });

  test('shutdown stops every worker; Ctrl-C reaching the workers does not (the primary decides)', async () => {
    const workers = await start();
    const pids = workers.pids();
    assert.equal(pids.length, 2);
    try {
      for (const pid of pids) process.kill(pid, 'SIGINT');
      const agent = new Agent({ keepAlive: false });
      agents.push(agent);
      assert.equal((await call(workers, ca, agent, '/healthz')).status, 200);
      assert.deepEqual(workers.pids(), pids);
    } finally {
      await workers.close();
    }
    for (const pid of pids) assert.throws(() => process.kill(pid, 0), { code: 'ESRCH' });
  });
});
