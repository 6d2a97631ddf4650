/**
 * Benchmark: the informer's cache of N pods (default 100,000), synced from the simulated API server
 * over HTTPS in pages of 500 (kubeList), two ways in the same run:
 * - slim: this project's informer with a transform that keeps the fields a controller needs
 *   (namespace, name, phase, node, readiness, labels, owner kind);
 * - whole objects: the same informer keeping every pod as client-node delivers it, which is what
 *   client-node's own informer (and a controller-runtime cache) holds.
 * Prints the heap the cache takes (measured after a full GC), the sync time and the ratios.
 *
 *   node bench/informer.ts [--pods N]
 */

import { parseArgs } from 'node:util';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import type { V1Pod } from '@kubernetes/client-node';
import { Informer, kubeList, kubeWatch } from '../src/kube/informer.ts';
import { type KubeObject, type SimApiServer, startApiServer } from '../src/sim/apiserver/index.ts';

setFlagsFromString('--expose-gc');
const collectGarbage = runInNewContext('gc') as () => void;

/** What a pod controller (validation, node readiness) needs of a pod. */
export interface PodRecord {
  namespace: string;
  name: string;
  phase: string | undefined;
  nodeName: string | undefined;
  ready: boolean;
  labels: Record<string, string> | undefined;
  ownerKind: string | undefined;
}

/** The slim transform the benchmark (and controllers) use. */
export function slimPod(pod: V1Pod): PodRecord {
  return {
    namespace: pod.metadata?.namespace ?? '',
    name: pod.metadata?.name ?? '',
    phase: pod.status?.phase,
    nodeName: pod.spec?.nodeName,
    ready: pod.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false,
    labels: pod.metadata?.labels,
    ownerKind: pod.metadata?.ownerReferences?.[0]?.kind,
  };
}

/** A pod as a Deployment on a 5,000-node cluster makes it (image, env, probes, volumes, status). */
export function samplePod(i: number): KubeObject {
  const app = `app-${i % 500}`;
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      namespace: `team-${i % 20}`,
      name: `${app}-7d9f8c6b5-${i.toString(36).padStart(5, '0')}`,
      labels: { app, 'pod-template-hash': '7d9f8c6b5' },
      ownerReferences: [
        {
          apiVersion: 'apps/v1',
          kind: 'ReplicaSet',
          name: `${app}-7d9f8c6b5`,
          uid: `uid-${i % 500}`,
          controller: true,
        },
      ],
    },
    spec: {
      nodeName: `node-${i % 5000}`,
      serviceAccountName: 'default',
      containers: [
        {
          name: app,
          image: `registry.example.com/${app}:v1.2.3`,
          ports: [{ containerPort: 8080, protocol: 'TCP' }],
          env: [
            { name: 'LOG_LEVEL', value: 'info' },
            { name: 'POD_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
          ],
          resources: { requests: { cpu: '100m', memory: '128Mi' }, limits: { memory: '256Mi' } },
          readinessProbe: { httpGet: { path: '/healthz', port: 8080 }, periodSeconds: 10 },
          volumeMounts: [
            {
              name: 'kube-api-access',
              mountPath: '/var/run/secrets/kubernetes.io/serviceaccount',
              readOnly: true,
            },
          ],
        },
      ],
      volumes: [
        {
          name: 'kube-api-access',
          projected: { sources: [{ serviceAccountToken: { path: 'token', expirationSeconds: 3607 } }] },
        },
      ],
    },
    status: {
      phase: 'Running',
      podIP: `100.96.${(i >> 8) & 255}.${i & 255}`,
      conditions: [
        { type: 'Ready', status: 'True' },
        { type: 'ContainersReady', status: 'True' },
        { type: 'PodScheduled', status: 'True' },
      ],
      containerStatuses: [
        {
          name: app,
          ready: true,
          restartCount: 0,
          image: `registry.example.com/${app}:v1.2.3`,
          imageID: 'sha256:abc',
          started: true,
        },
      ],
    },
  };
}

/** Heap and time of one way of caching the pods. */
export interface CacheFigures {
  cached: number;
  heapBytes: number;
  syncMs: number;
}

/** The figures of a run. */
export interface InformerBenchResult {
  pods: number;
  slim: CacheFigures;
  whole: CacheFigures;
}

function heapUsed(): number {
  collectGarbage();
  collectGarbage();
  return process.memoryUsage().heapUsed;
}

async function measure<R>(
  sim: SimApiServer,
  transform: ((pod: V1Pod) => R) | undefined,
): Promise<CacheFigures> {
  const kubeConfig = sim.kubeConfig();
  const before = heapUsed();
  const started = performance.now();
  const informer = new Informer<V1Pod, R>({
    name: 'pods',
    path: '/api/v1/pods',
    list: kubeList(kubeConfig, '/api/v1/pods'),
    watch: kubeWatch(kubeConfig),
    transform,
  });
  informer.start();
  await informer.waitForSync();
  const syncMs = performance.now() - started;
  await informer.stop();
  const heapBytes = heapUsed() - before;
  const cached = informer.size;
  return { cached, heapBytes, syncMs };
}

/** Seeds N pods into a simulator and measures both caches. */
export async function runInformerBench(pods: number): Promise<InformerBenchResult> {
  const sim = await startApiServer();
  try {
    for (let team = 0; team < 20; team++) {
      sim.store.create({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: `team-${team}` } });
    }
    for (let i = 0; i < pods; i++) sim.store.create(samplePod(i));
    const slim = await measure(sim, slimPod);
    const whole = await measure(sim, undefined);
    return { pods, slim, whole };
  } finally {
    await sim.close();
  }
}

/** The report printed by the benchmark. */
export function formatInformerBench(result: InformerBenchResult): string {
  const mb = (bytes: number) => (bytes / 1024 / 1024).toFixed(1);
  const row = (name: string, f: CacheFigures) =>
    `${name.padEnd(6)} cached=${String(f.cached).padEnd(7)} heap=${mb(f.heapBytes).padStart(7)} MiB ` +
    `(${Math.round(f.heapBytes / Math.max(1, f.cached))} B/pod)  sync=${(f.syncMs / 1000).toFixed(2)}s`;
  const ratio = result.whole.heapBytes / Math.max(1, result.slim.heapBytes);
  return [
    `informer: ${result.pods} pods listed from the simulated API server in pages of 500`,
    row('slim', result.slim),
    row('whole', result.whole),
    `ratio  ${ratio.toFixed(1)}x less memory with slim records`,
  ].join('\n');
}

if (import.meta.main) {
  const { values } = parseArgs({ options: { pods: { type: 'string', default: '100000' } } });
  const pods = Number(values.pods);
  if (!Number.isInteger(pods) || pods < 1)
    throw new Error(`--pods must be a positive integer, got ${values.pods}`);
  process.stdout.write(`${formatInformerBench(await runInformerBench(pods))}\n`);
}
