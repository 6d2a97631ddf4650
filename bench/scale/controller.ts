/**
 * The controller of the scale benchmark, in a process of its own so that its resident memory is the
 * controller's alone: `run`'s composition root (src/cli/run.ts `startController`) pointed at the
 * world process with the config the simulated cluster wrote, without the bootstrap server (the join
 * storm measures that separately). It tells the parent when every informer has synced, and answers
 * for its memory and its NodeController's reconcile counts.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { KubeConfig } from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import { type RunningController, startController } from '../../src/cli/run.ts';
import { loadConfigFile } from '../../src/config/loader.ts';
import { createLogger } from '../../src/log.ts';
import type { WorldReady } from './world.ts';

/** The informers whose first list the controller waits for: the shared Node watch and the gauges' pods. */
export const controllerInformers = ['nodes', 'pods-validation'];

/** Memory of the controller process, in MiB. */
export interface ControllerMemory {
  rssMiB: number;
  heapUsedMiB: number;
}

type ToController =
  | { type: 'start'; world: Pick<WorldReady, 'kubeconfig' | 'configPath' | 'clients'> }
  | { type: 'memory'; collect?: boolean }
  | { type: 'reconciles' }
  | { type: 'exit' };
type FromController =
  | { type: 'started'; url: string }
  | { type: 'synced'; ms: number; memory: ControllerMemory }
  | { type: 'memory'; memory: ControllerMemory }
  | { type: 'reconciles'; byResult: Record<string, number> }
  | { type: 'failed'; error: string };

setFlagsFromString('--expose-gc');
const collectGarbage = runInNewContext('gc') as () => void;

function memoryOf(collect = false): ControllerMemory {
  if (collect) collectGarbage();
  const { rss, heapUsed } = process.memoryUsage();
  return { rssMiB: rss / 1048576, heapUsedMiB: heapUsed / 1048576 };
}

/** The value of every sample of a metric, by the given label. */
async function samplesBy(registry: Registry, metric: string, label: string): Promise<Record<string, number>> {
  const found = registry.getSingleMetric(metric);
  if (!found) return {};
  const { values } = await found.get();
  const out: Record<string, number> = {};
  for (const v of values) {
    const key = String(v.labels[label] ?? '');
    out[key] = (out[key] ?? 0) + v.value;
  }
  return out;
}

async function serveController(): Promise<void> {
  const send = (message: FromController) => process.send?.(message);
  process.on('disconnect', () => process.exit(0));
  const registry = new Registry();
  let controller: RunningController | undefined;
  process.on('message', (message: ToController) => {
    void (async () => {
      switch (message.type) {
        case 'start': {
          const started = performance.now();
          const kubeConfig = new KubeConfig();
          kubeConfig.loadFromString(message.world.kubeconfig);
          controller = await startController({
            config: await loadConfigFile(message.world.configPath),
            kubeConfig,
            cloud: message.world.clients.cloud,
            vfsOptions: message.world.clients.vfsOptions,
            bootstrap: false,
            registry,
            // Each timed scrape builds its exposition, as a Prometheus scrape every 15 s does; the
            // ops server's one-second reuse would answer most of 200 back-to-back scrapes from memory.
            metricsReuseMs: 0,
            // Its warnings (a failed list, a lost lease) explain a slow phase, so they are shown.
            logger: createLogger({ level: 'warn', format: 'text' }),
          });
          send({ type: 'started', url: controller.url });
          for (;;) {
            const synced = await samplesBy(registry, 'informer_synced', 'resource');
            if (controllerInformers.every((name) => synced[name] === 1)) break;
            await new Promise((resolve) => setTimeout(resolve, 100));
          }
          send({ type: 'synced', ms: performance.now() - started, memory: memoryOf() });
          return;
        }
        case 'memory':
          send({ type: 'memory', memory: memoryOf(message.collect) });
          return;
        case 'reconciles':
          send({
            type: 'reconciles',
            byResult: await samplesBy(registry, 'node_controller_reconciles_total', 'result'),
          });
          return;
        case 'exit':
          await controller?.stop();
          process.exit(0);
      }
    })().catch((err: Error) => send({ type: 'failed', error: err.stack ?? err.message }));
  });
}

/** The parent's handle on a controller process. */
export interface ControllerProcess {
  /** Where its /metrics is served. */
  url: string;
  pid: number;
  /** Resolves once every informer of {@link controllerInformers} has completed its first list. */
  synced: Promise<{ ms: number; memory: ControllerMemory }>;
  memory(collect?: boolean): Promise<ControllerMemory>;
  /** The NodeController's reconciles so far, by result (`labelled`, `unchanged`, …). */
  reconciles(): Promise<Record<string, number>>;
  /** The process's resident memory read from /proc, in MiB. */
  rssMiB(): number;
  stop(): Promise<void>;
}

/** Forks a controller process pointed at the world. */
export async function startControllerProcess(
  world: Pick<WorldReady, 'kubeconfig' | 'configPath' | 'clients'>,
): Promise<ControllerProcess> {
  const child: ChildProcess = fork(new URL(import.meta.url).pathname, [], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const next = <T extends FromController['type']>(type: T) =>
    new Promise<Extract<FromController, { type: T }>>((resolve, reject) => {
      const onExit = (code: number | null) => reject(new Error(`the controller process exited with ${code}`));
      const onMessage = (reply: FromController) => {
        if (reply.type !== type && reply.type !== 'failed') return;
        child.off('message', onMessage).off('exit', onExit);
        if (reply.type === 'failed') reject(new Error(reply.error));
        else resolve(reply as Extract<FromController, { type: T }>);
      };
      child.on('message', onMessage).once('exit', onExit);
    });
  // One question at a time: answers carry no id, so two of the same type in flight would both take
  // the first answer.
  let queue: Promise<unknown> = Promise.resolve();
  const ask = <T extends FromController['type']>(message: ToController, type: T) => {
    const reply = queue.then(() => {
      const answer = next(type);
      child.send(message);
      return answer;
    });
    queue = reply.catch(() => undefined);
    return reply;
  };
  const synced = next('synced');
  const { url } = await ask({ type: 'start', world }, 'started');
  return {
    url,
    pid: child.pid as number,
    synced: synced.then(({ ms, memory }) => ({ ms, memory })),
    memory: async (collect) => (await ask({ type: 'memory', collect }, 'memory')).memory,
    reconciles: async () => (await ask({ type: 'reconciles' }, 'reconciles')).byResult,
    rssMiB: () => rssMiBOf(child.pid as number),
    stop: async () => {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.send({ type: 'exit' } satisfies ToController);
      await exited;
    },
  };
}

/** A process's resident memory from /proc, in MiB. */
function rssMiBOf(pid: number): number {
  const kib = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
  return Number(kib) / 1024;
}

if (import.meta.main) await serveController();
