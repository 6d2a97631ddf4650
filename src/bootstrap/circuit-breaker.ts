/**
 * A circuit breaker for a dependency the bootstrap server calls once per request (STS for every AWS
 * proof, the approval webhook, a cloud's read of one server, the impersonation guard's Node read).
 * While such a dependency is down, telling nodes to wait (Retry-After, dependency.ts) is not enough:
 * kops' nodeup ignores it and retries every ~10 s, so 5,000 nodes waiting to join would still send
 * STS some 500 calls a second, each one waiting out its timeout. That load lands on a service that is failing, on the account's
 * quota, and on this server's sockets.
 *
 * So once the dependency has failed `failuresToOpen` times in a row over at least `minFailingMs`,
 * the circuit opens. After that, a request is answered with a fault at once, without a call. One call
 * every `probeIntervalMs` still goes through as a probe. The first call that gets any answer from the
 * dependency closes the circuit. A refusal or throttling counts as an answer: the dependency is up.
 * Only what says it is down counts as a failure: no connection, no answer in time, and (from STS, the
 * API server, a cloud) a 5xx. Any answer of the webhook, a 5xx included, is about the review it was
 * sent, which the requester chose: only an unreachable or silent webhook is paused.
 *
 * Only the caller knows which outcome is which, so it tells the breaker: {@link CallTicket.answered},
 * {@link CallTicket.failed}, or {@link CallTicket.release} when the call never reached the dependency
 * (a proof that could not even be sent). A request whose call is paused is still a fault, never a
 * denial: the caller turns {@link PausedCallError} into its dependency's fault, as it does any other
 * failure. An attacker cannot open the circuit or hold it open: what a request can make the
 * dependency answer (a refusal, throttling of the signer's account, a webhook's 500 on an odd review)
 * is an answer, and only the dependency failing to answer opens it. Requests that reach nothing
 * (release) cannot close it either. And a probe's answer is the dependency's answer whoever sent
 * the request.
 */
import { UnavailableError } from '../errors.ts';
import type { Logger } from '../log.ts';

/** A call that was not made because its dependency's circuit is open. */
export class PausedCallError extends UnavailableError {}

/** Options of {@link CircuitBreaker}. */
export interface CircuitBreakerOptions {
  /** What is called, for the messages: `STS`, `the approval webhook`. */
  name: string;
  /** Failures in a row that open the circuit (default 20). */
  failuresToOpen?: number;
  /** The least time that run of failures must span (default 5 s): a blip never opens it. */
  minFailingMs?: number;
  /** While open, one call goes through this often (default 2 s). */
  probeIntervalMs?: number;
  /** Where opening and closing are written (one line each); none when not given. */
  logger?: Logger;
  /** Milliseconds, monotonic (default `performance.now`). */
  now?: () => number;
}

/** A call let through: the caller says how it ended, exactly once. */
export interface CallTicket {
  /** The dependency answered (a verdict, a refusal, throttling): it is up. */
  answered(): void;
  /** The dependency could not be reached, did not answer in time, or answered that it failed. */
  failed(): void;
  /** The call never reached the dependency: it says nothing either way. */
  release(): void;
}

/** Where a circuit stands, for tests and metrics. */
export type CircuitState = 'closed' | 'open';

interface Open {
  since: number;
  /** When the run of failures that opened it began. */
  failingSince: number;
  nextProbeAt: number;
  probing: boolean;
  /** Calls answered without being made. */
  paused: number;
}

/** One dependency's circuit (see the module comment). */
export class CircuitBreaker {
  readonly #name: string;
  readonly #failuresToOpen: number;
  readonly #minFailingMs: number;
  readonly #probeIntervalMs: number;
  readonly #logger: Logger | undefined;
  readonly #now: () => number;
  /** Failures in a row while closed, and when the first of them ended. */
  #failures = 0;
  #firstFailureAt = 0;
  #open: Open | undefined;

  constructor(options: CircuitBreakerOptions) {
    this.#name = options.name;
    this.#failuresToOpen = options.failuresToOpen ?? 20;
    this.#minFailingMs = options.minFailingMs ?? 5_000;
    this.#probeIntervalMs = options.probeIntervalMs ?? 2_000;
    this.#logger = options.logger;
    this.#now = options.now ?? (() => performance.now());
  }

  get state(): CircuitState {
    return this.#open ? 'open' : 'closed';
  }

  /**
   * Whether a call now would be paused: open, and no probe due. (A caller that must spend something
   * else before its call, STS for the guard's read, asks this first; the probe stays admit's.)
   */
  get pausing(): boolean {
    const open = this.#open;
    return open !== undefined && (open.probing || this.#now() < open.nextProbeAt);
  }

  /**
   * Lets a call through (closed, or open and a probe is due), or throws {@link PausedCallError}.
   */
  admit(): CallTicket {
    const open = this.#open;
    let probe = false;
    if (open) {
      if (this.pausing) throw this.paused();
      open.probing = true;
      open.nextProbeAt = this.#now() + this.#probeIntervalMs;
      probe = true;
    }
    let settled = false;
    const settle = (outcome: 'answered' | 'failed' | 'released') => {
      if (settled) return;
      settled = true;
      this.#settle(outcome, probe);
    };
    return {
      answered: () => settle('answered'),
      failed: () => settle('failed'),
      release: () => settle('released'),
    };
  }

  /** The error of a call not made now (counted among the calls the circuit spared). */
  paused(): PausedCallError {
    const now = this.#now();
    const open = this.#open;
    if (open) open.paused++;
    const failing = open ? Math.round((now - open.failingSince) / 1000) : 0;
    return new PausedCallError(
      `${this.#name} has failed every call for ${failing} s; calls to it are paused, one is tried every ${this.#probeIntervalMs / 1000} s`,
      { details: { reason: 'circuit-open' } },
    );
  }

  #settle(outcome: 'answered' | 'failed' | 'released', probe: boolean): void {
    const open = this.#open;
    // A probe that reached nothing frees its turn at once; one that failed keeps the interval.
    if (open && probe) open.probing = false;
    if (outcome === 'released') {
      if (open && probe) open.nextProbeAt = this.#now();
      return;
    }
    if (outcome === 'answered') {
      this.#failures = 0;
      if (open) {
        this.#open = undefined;
        this.#logger?.info(
          {
            dependency: this.#name,
            pausedSeconds: Math.round((this.#now() - open.since) / 1000),
            callsPaused: open.paused,
          },
          'dependency answers again: calls to it resumed',
        );
      }
      return;
    }
    if (open) return;
    const now = this.#now();
    if (this.#failures === 0) this.#firstFailureAt = now;
    this.#failures++;
    if (this.#failures >= this.#failuresToOpen && now - this.#firstFailureAt >= this.#minFailingMs) {
      this.#open = {
        since: now,
        failingSince: this.#firstFailureAt,
        nextProbeAt: now + this.#probeIntervalMs,
        probing: false,
        paused: 0,
      };
      this.#logger?.warn(
        {
          dependency: this.#name,
          failures: this.#failures,
          failingSeconds: Math.round((now - this.#firstFailureAt) / 1000),
          probeIntervalSeconds: this.#probeIntervalMs / 1000,
        },
        'dependency failed every call: calls to it paused, one tried at each interval until it answers',
      );
      this.#failures = 0;
    }
  }
}

/** A policy's circuit of `name` with the breaker's defaults, saying its changes to `logger` when given. */
export function circuitOf(name: string, options: { logger?: Logger }): CircuitBreaker {
  return new CircuitBreaker({ name, ...(options.logger ? { logger: options.logger } : {}) });
}
