/**
 * One storm measured: fired, timed, the CPU of both sides and this process's GC pauses read, the
 * server's event loop asked how busy it was, the certificates verified.
 */
import { X509Certificate } from 'node:crypto';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { fire } from './client.ts';
import { ownCpuSeconds } from './server-process.ts';
import type { Reply, ServerProcess, StormFigures, StormNode, StormRequest } from './types.ts';
import { type CertificateOf, verifyReplies } from './verify.ts';

/**
 * A full collection of this process's heap, run before every storm whichever server it measures.
 * This process holds the clients, the simulators and the last storms' answers and certificates; left
 * alone, a major collection of about half a second landed inside whichever storm was running (in
 * three runs, always one of ours), stalled its clients and made that server look slow while its
 * event loop sat idle (docs/performance.md). The servers' own collections are part of their cost
 * and are left alone.
 */
setFlagsFromString('--expose-gc');
const collectGarbage = runInNewContext('gc') as () => void;

/** Milliseconds this process spent paused for garbage collection while `work` ran. */
async function gcPauseDuring<T>(work: () => Promise<T>): Promise<{ result: T; gcMs: number }> {
  let gcMs = 0;
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) gcMs += entry.duration;
  });
  observer.observe({ entryTypes: ['gc'] });
  try {
    const result = await work();
    // Entries are delivered asynchronously: let the last ones arrive before counting.
    await new Promise((resolve) => setImmediate(resolve));
    return { result, gcMs };
  } finally {
    observer.disconnect();
  }
}

/** The share of the time between two readings that an event loop was busy. */
function busyShare(
  before: { idle: number; active: number } | undefined,
  after: { idle: number; active: number } | undefined,
): number | undefined {
  if (!before || !after) return undefined;
  const active = after.active - before.active;
  return active / (active + after.idle - before.idle);
}

/** What checks a storm's answers: the nodes in request order, where their certificate is, the CA. */
export interface StormCheck {
  nodes: readonly StormNode[];
  certificateOf: CertificateOf;
  caPem: string;
  /** Counts the good answers instead of verifying certificates (bench/tls-floor.ts answers no certificate). */
  verify?: (replies: readonly Reply[]) => { verified: number; firstFailure?: string };
}

/** One storm against a running server: fired, timed, its CPU measured, its certificates verified. */
export async function measureStorm(
  name: string,
  server: ServerProcess,
  requests: readonly StormRequest[],
  check: StormCheck,
  options: { keepAlive: boolean; concurrency: number; groups?: string; attempts?: number },
): Promise<StormFigures> {
  collectGarbage();
  const loopBefore = await server.eventLoop?.();
  const serverCpu = server.cpuSeconds();
  const clientCpu = ownCpuSeconds();
  const { groups, ...rest } = options;
  const tls = { caPem: check.caPem, groups };
  const {
    result: { replies, wallMs, retries },
    gcMs,
  } = await gcPauseDuring(() => fire(server.url, requests, { tls, ...rest }));
  const serverCpuSeconds = server.cpuSeconds() - serverCpu;
  const clientCpuSeconds = ownCpuSeconds() - clientCpu;
  const loopBusy = busyShare(loopBefore, await server.eventLoop?.());
  const figures: StormFigures = {
    name,
    nodes: requests.length,
    ...(check.verify
      ? check.verify(replies)
      : verifyReplies(replies, check.nodes, check.certificateOf, new X509Certificate(check.caPem))),
    wallMs,
    serverCpuSeconds,
    clientCpuSeconds,
    clientGcMs: gcMs,
    keyExchange: [...new Set(replies.map((r) => r.keyExchange).filter((k) => k !== undefined))].sort(),
  };
  if (retries > 0) figures.retries = retries;
  if (loopBusy !== undefined) figures.serverLoopBusy = loopBusy;
  return figures;
}
