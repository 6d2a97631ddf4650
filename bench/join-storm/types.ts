/** What the join-storm benchmark's modules share: the storms' figures and requests, and a server process. */
import type { SigV4Credentials } from '../../src/cloud/aws/sigv4.ts';
import type { PlainKind } from './plain.ts';

/** One storm's figures. */
export interface StormFigures {
  name: string;
  nodes: number;
  /** Answers carrying a certificate that verifies against the CA and names the node. */
  verified: number;
  /** The first failure, when some node got no good certificate. */
  firstFailure?: string;
  wallMs: number;
  /** CPU seconds of the process serving the storm (our server or cfssl). */
  serverCpuSeconds: number;
  /** CPU seconds of this process (clients and simulators). */
  clientCpuSeconds: number;
  /** Milliseconds this process was paused for garbage collection during the storm. */
  clientGcMs: number;
  /** The share of the storm's wall time our server's event loop was busy (absent for cfssl). */
  serverLoopBusy?: number;
  /** The TLS key exchange groups the storm's connections negotiated (`X25519`, `X25519MLKEM768`). */
  keyExchange: string[];
  /** The plain comparison's connection kind and round (plain storms only). */
  kind?: PlainKind;
  round?: number;
  /** Requests sent again after a 503, a 429 or no answer (storms fired with retries only). */
  retries?: number;
  /** Cloud calls the AWS simulator served during the storm (aws storms only). */
  cloud?: { describeInstances: number; throttled: number; sts: number };
}

/** The figures of a run. */
export interface JoinStormResult {
  nodes: number;
  concurrency: number;
  /** The aws storms; absent when the run skipped them (`--plain-only`). */
  aws?: { batched: StormFigures; perNode: StormFigures };
  plain: StormFigures[];
  /** cfssl's storms, or why cfssl could not run here. */
  cfssl: { version: string; storms: StormFigures[] } | { unavailable: string };
}

/** Options of `runJoinStorm`. */
export interface JoinStormOptions {
  nodes: number;
  concurrency?: number;
  /** Skip the aws storms (the per-node one takes minutes): only plain issuance and cfssl. */
  plainOnly?: boolean;
  /** Rounds of the plain comparison (default 1); the report gives the median of each. */
  rounds?: number;
  /** Processes serving the plain comparison (default: the number of cores, as cfssl uses them all). */
  workers?: number;
}

/** A node of the storm: its name (an instance id), CSR and request body. */
export interface StormNode {
  name: string;
  csrPem: string;
  body: string;
  credentials: SigV4Credentials;
}

/** One request of a storm. */
export interface StormRequest {
  path: string;
  body: string;
  authorization?: string;
}

/** An answer: HTTP status and body, or status 0 and the connection error. */
export interface Reply {
  status: number;
  text: string;
  /** The key exchange group of the connection that carried it. */
  keyExchange?: string;
  /** The answer's Retry-After, when it had one. */
  retryAfterSeconds?: number;
}

/** A running server process (ours or cfssl): its URL and its CPU time so far. */
export interface ServerProcess {
  url: string;
  cpuSeconds(): number;
  /** Our server's event loop so far: busy and idle ms (cfssl has none). */
  eventLoop?(): Promise<{ idle: number; active: number }>;
  stop(): Promise<void>;
}
