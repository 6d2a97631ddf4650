/**
 * What every cloud API simulator shares (the REST ones of rest-sim.ts, OpenStack, Scaleway, Azure):
 * the log of the requests it served by operation, the faults queued for its next requests (an error
 * status, a throttle with its wait, latency, a dropped connection) and the verbs tests queue them
 * with, and JSON answers. Each simulator keeps its own routes and its provider's error envelopes.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';

/** A fault for the next `times` requests (of `operation`, when given). */
export interface SimFault {
  times: number;
  operation?: string;
  /** Answer this status with the provider's error envelope. */
  status?: number;
  /** With a 429: the wait the answer asks for, in seconds. */
  retryAfterSeconds?: number;
  /** Wait this long first. */
  latencyMs?: number;
  /** Close the connection without answering. */
  drop?: boolean;
}

/** Faults queued for the next requests; the first one matching a request's operation is spent on it. */
export class FaultQueue {
  #faults: SimFault[] = [];

  add(fault: SimFault): void {
    this.#faults.push({ ...fault });
  }

  clear(): void {
    this.#faults = [];
  }

  /** The fault for one request of `operation`, spent. */
  take(operation: string): SimFault | undefined {
    const fault = this.#faults.find((f) => f.operation === undefined || f.operation === operation);
    if (!fault) return undefined;
    fault.times--;
    this.#faults = this.#faults.filter((f) => f.times > 0);
    return fault;
  }
}

/** The fault verbs of a simulator's controls. */
export interface FaultVerbs {
  /** The next `times` requests (of `operation`, or any) answer `status`. */
  failNext(times: number, status: number, operation?: string): void;
  /** The next `times` requests answer 429, asking to wait `retryAfterSeconds`. */
  throttleNext(times: number, retryAfterSeconds: number, operation?: string): void;
  /** The next `times` requests wait `latencyMs` first. */
  delayNext(times: number, latencyMs: number, operation?: string): void;
  /** The next `times` requests are dropped without an answer. */
  dropNext(times: number, operation?: string): void;
  resetFaults(): void;
}

/** The verbs over one queue. */
export function faultVerbs(queue: FaultQueue): FaultVerbs {
  const only = (operation: string | undefined) => (operation ? { operation } : {});
  return {
    failNext: (times, status, operation) => queue.add({ times, status, ...only(operation) }),
    throttleNext: (times, retryAfterSeconds, operation) =>
      queue.add({ times, status: 429, retryAfterSeconds, ...only(operation) }),
    delayNext: (times, latencyMs, operation) => queue.add({ times, latencyMs, ...only(operation) }),
    dropNext: (times, operation) => queue.add({ times, drop: true, ...only(operation) }),
    resetFaults: () => queue.clear(),
  };
}

/**
 * Applies a fault's latency, then its drop; true when the connection was dropped (nothing more is
 * answered). A status fault is the caller's to answer, in its provider's envelope.
 */
export async function applyTransportFault(
  fault: SimFault | undefined,
  req: IncomingMessage,
): Promise<boolean> {
  if (fault?.latencyMs) await new Promise((resolve) => setTimeout(resolve, fault.latencyMs));
  if (!fault?.drop) return false;
  req.socket.destroy();
  return true;
}

/** The requests a simulator served, by operation. */
export class CallLog<C extends { operation: string; status?: number }> {
  readonly calls: C[] = [];

  add(call: C): C {
    this.calls.push(call);
    return call;
  }

  /** Served requests of one operation (with `status`, only those answered with it). */
  count(operation: string, status?: number): number {
    return this.calls.filter(
      (c) => c.operation === operation && (status === undefined || c.status === status),
    ).length;
  }

  clear(): void {
    this.calls.length = 0;
  }
}

/** A JSON answer (exactly `application/json`: the Scaleway SDK parses a body as JSON only under it). */
export function sendJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
    ...headers,
  });
  res.end(text);
}

/** The role kops tags an instance group's servers with: its control plane by name, else nodes. */
export function kopsRoleOf(instanceGroup: string): 'ControlPlane' | 'Node' {
  return instanceGroup.startsWith('control-plane') ? 'ControlPlane' : 'Node';
}

/** The `n`th address of 10.0.0.0/8, a distinct private address per seeded server. */
export function nthPrivateAddress(n: number): string {
  return `10.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}`;
}
