/**
 * Fault injection for the AWS simulator: for the next N requests to one service (or until `reset`),
 * answer an AWS error document (throttling, 5xx), add latency, or drop the connection without an
 * answer — what a throttled, failing, slow or unreachable EC2 or STS looks like to a client.
 */
import { AwsSimError } from './query.ts';

/** The services the simulator speaks. */
export type AwsService = 'ec2' | 'autoscaling' | 'sts';

/** One fault, for requests to `service`. */
export interface AwsFault {
  service: AwsService;
  /** How many requests it hits (default: every one until `reset`). */
  count?: number;
  /**
   * The error answered: `{ code, status }` (e.g. `Throttling`/400 as STS throttles,
   * `RequestLimitExceeded`/503 as EC2 does, `ServiceUnavailable`/503). Absent: no error.
   */
  error?: { code: string; status: number; message?: string };
  /** Wait this long before answering (or dropping). */
  latencyMs?: number;
  /** Close the connection without answering. */
  drop?: boolean;
  /**
   * Answer, but rewritten: the XML the simulator would send goes through this first (a page token
   * that repeats, another instance than asked for, a truncated body), to play a broken API or proxy.
   * Returning a status too replaces the answer's (a proxy answering a cached 200 page for an error).
   */
  rewrite?: AwsRewrite;
}

/** What happens to one request. */
export interface AwsFaultPlan {
  latencyMs: number;
  error?: AwsSimError;
  drop: boolean;
  rewrite?: AwsRewrite;
}

/** Rewrites an answer's XML, and optionally its status. */
export type AwsRewrite = (xml: string, status: number) => string | { status: number; xml: string };

interface Active {
  fault: AwsFault;
  remaining: number | undefined;
}

/** The fault controls of a running AWS simulator. */
export class AwsFaults {
  #active: Active[] = [];

  /** Adds a fault; faults apply in the order added, the first that matches a request decides. */
  add(fault: AwsFault): void {
    this.#active.push({ fault, remaining: fault.count });
  }

  /** Removes every fault. */
  reset(): void {
    this.#active = [];
  }

  /** Decides the fault of one request to `service` (called by the server), spending one of its count. */
  plan(service: AwsService): AwsFaultPlan | undefined {
    const active = this.#active.find((a) => a.fault.service === service);
    if (!active) return undefined;
    if (active.remaining !== undefined) active.remaining--;
    this.#active = this.#active.filter((a) => a.remaining === undefined || a.remaining > 0);
    const { error, latencyMs = 0, drop = false, rewrite } = active.fault;
    return {
      latencyMs,
      drop,
      ...(rewrite ? { rewrite } : {}),
      ...(error
        ? {
            error: new AwsSimError(
              error.code,
              error.message ?? `injected fault: ${error.code}`,
              error.status,
            ),
          }
        : {}),
    };
  }
}
