/**
 * A worker entry (forked as the worker's main module) for the tests of src/bootstrap/workers.ts: the real bootstrap server with one small
 * policy that spends each bearer token once through the real replay guard (ConfigMap markers in the
 * API server), and `/cluster-info` answering the worker's process id, so that a test knows which
 * worker a connection reached.
 */
import { createHash } from 'node:crypto';
import { CertificatesV1Api, CoreV1Api, KubeConfig } from '@kubernetes/client-node';
import { silentLogger } from '../log.ts';
import type { ConnectionLimits } from '../net/hardened-server.ts';
import { caFromPem } from '../pki/ca.ts';
import { parsePrivateKeyPem } from '../pki/keys.ts';
import { bootstrapMetrics } from './metrics.ts';
import { CsrQueue } from './queue.ts';
import { ConfigMapReplayGuard } from './replay-guard.ts';
import { serveBootstrap } from './server.ts';
import type { BootstrapPolicy } from './types.ts';
import { runWorker, type WorkerServer, type WorkerServices } from './workers-child.ts';

/** What the test primary sends. */
export interface TestWorkerSpec {
  kubeconfig: string;
  ca: { bundle: string; key: string };
  limits?: Partial<ConnectionLimits>;
}

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

/**
 * Queues `Bearer queue-me` for a human; otherwise approves the claimed name when the bearer token has
 * not been spent by another request, and denies a replay.
 */
function spendOncePolicy(guard: ConfigMapReplayGuard): BootstrapPolicy {
  return {
    name: 'test-spend-once',
    async evaluate(request) {
      if (request.proof.kind !== 'bootstrap-token') return { verdict: 'abstain', reasons: ['no token'] };
      if (request.proof.token === 'queue-me') return { verdict: 'queue', reasons: ['a human decides'] };
      const nodeName = request.claimedNodeName ?? 'unnamed';
      const expires = new Date(Date.now() + 600_000);
      if (!(await guard.claim(sha256(request.proof.token), expires, sha256(request.body.toString('utf8'))))) {
        return { verdict: 'deny', reasons: ['this token was already spent'] };
      }
      return {
        verdict: 'approve',
        facts: { nodeName, instanceGroup: 'nodes', dnsNames: [], ipAddresses: [], evidence: {} },
        reasons: ['first use of the token'],
      };
    },
  };
}

/** The entry: serves on the shared port with the shared caps and limit. */
async function serveTestWorker(spec: unknown, services: WorkerServices): Promise<WorkerServer> {
  const { kubeconfig, ca: caPem, limits } = spec as TestWorkerSpec;
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromString(kubeconfig);
  const guard = new ConfigMapReplayGuard({ core: kubeConfig.makeApiClient(CoreV1Api), kubeConfig });
  const ca = caFromPem(caPem.bundle, parsePrivateKeyPem(caPem.key));
  // Each worker's own queue, over the CSRs every worker writes: a poll finds its request on any worker.
  const queue = new CsrQueue({ certificates: kubeConfig.makeApiClient(CertificatesV1Api), kubeConfig, ca });
  queue.start();
  const server = await serveBootstrap({
    listen: services.listen,
    tls: services.tls,
    context: {
      ca,
      queue,
      policies: [spendOncePolicy(guard)],
      readNode: async () => undefined,
      apiServer: 'https://api.internal.workers.example.com',
      metrics: bootstrapMetrics(services.registry),
      logger: silentLogger,
    },
    clusterInfoHandler: (_req, res) => {
      res.end(String(process.pid));
    },
    limiter: services.limiter,
    gate: services.gate,
    reusePort: services.reusePort,
    connectionLimits: limits,
    registry: services.registry,
  });
  return {
    address: server.address,
    setSecureContext: (tls) => server.setSecureContext(tls),
    close: () => server.close().then(() => queue.stop()),
  };
}

if (import.meta.main) runWorker(serveTestWorker);
