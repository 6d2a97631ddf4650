/**
 * The AWS SDK clients the controller uses, configured once: the region (configured or from IMDS),
 * adaptive retries (the SDK's client-side rate limiter backs off when EC2 answers
 * `RequestLimitExceeded`), an endpoint override for the simulator or a VPC endpoint, and a count of
 * every request each client sends (kops_controller_cloud_requests_total), and the SDK's warnings in
 * the controller's log. Every attempt has a deadline (the SDK's default handler has none: an endpoint
 * that accepted the connection and never answered held the call, and the process, forever), and
 * destroying the clients gives up the calls in flight instead of letting their retries reconnect.
 */
import { AutoScalingClient } from '@aws-sdk/client-auto-scaling';
import { EC2Client, type EC2ClientConfig } from '@aws-sdk/client-ec2';
import { STSClient } from '@aws-sdk/client-sts';
import { type Logger, silentLogger } from '../../log.ts';
import { egressAgent } from '../../net/egress-proxy.ts';
import { type CloudCallRecorder, type CloudCallResult, secondsSince } from '../metrics.ts';
import { isAwsThrottling } from './errors.ts';
import { type ImdsOptions, resolveRegion } from './region.ts';
import type { SigV4Credentials } from './sigv4.ts';

/** How to build the clients. */
export interface AwsClientOptions {
  /** The region; when absent it comes from IMDS. */
  region?: string;
  /** One endpoint for every service (the simulator); default: the services' public endpoints. */
  endpoint?: string;
  /** Static credentials; default: the SDK's chain (environment, instance profile, …). */
  credentials?: SigV4Credentials;
  /** Attempts per call including retries (default 8, so throttling is ridden out, not surfaced). */
  maxAttempts?: number;
  /** How long one attempt may wait for its answer, and the longest silence while reading it (default 20 s). */
  requestTimeoutMs?: number;
  imds?: ImdsOptions;
  /** Where every request and call is counted (default: nowhere). */
  cloudCalls?: CloudCallRecorder;
  /** Where the SDK's warnings (and, at debug, its failed calls) are logged (default: nowhere). */
  logger?: Logger;
}

/** The clients, sharing one configuration. */
export interface AwsClients {
  region: string;
  ec2: EC2Client;
  autoscaling: AutoScalingClient;
  sts: STSClient;
  /** Closes the clients' connections. */
  destroy(): void;
}

/**
 * How long an attempt may take to connect: AWS's endpoints (and VPC endpoints) connect in
 * milliseconds, so one that does not within this is down, and the retry tries another address.
 */
const connectionTimeoutMs = 5_000;

/**
 * How long an attempt may wait for its answer (a DescribeInstances of 1,000 instances takes a few
 * seconds), and the longest silence while its body is read. The callers' own deadlines are shorter
 * than 8 attempts of it (30 s per validation read, 10 s per bootstrap lookup); this bounds the calls
 * that have none, and the sockets a hung endpoint would otherwise hold for good.
 */
const defaultRequestTimeoutMs = 20_000;

/** Builds the EC2, Auto Scaling and STS clients. */
export async function createAwsClients(options: AwsClientOptions = {}): Promise<AwsClients> {
  const region = await resolveRegion(options.region, options.imds);
  const requestTimeout = options.requestTimeoutMs ?? defaultRequestTimeoutMs;
  const config = {
    region,
    retryMode: 'adaptive',
    maxAttempts: options.maxAttempts ?? 8,
    logger: sdkLogger(options.logger ?? silentLogger),
    requestHandler: {
      connectionTimeout: Math.min(connectionTimeoutMs, requestTimeout),
      requestTimeout,
      // Without it the SDK only logs a warning when requestTimeout passes, and keeps waiting.
      throwOnRequestTimeout: true,
      socketTimeout: requestTimeout,
      // The SDK's own agents' settings, honouring the egress proxy (src/net/egress-proxy.ts).
      httpAgent: egressAgent('http:', { keepAlive: true, maxSockets: 50 }),
      httpsAgent: egressAgent('https:', { keepAlive: true, maxSockets: 50 }),
    },
    ...(options.endpoint === undefined ? {} : { endpoint: options.endpoint }),
    ...(options.credentials === undefined ? {} : { credentials: options.credentials }),
  };
  const ec2 = new EC2Client(config);
  const autoscaling = new AutoScalingClient(config);
  const sts = new STSClient(config);
  const closed = new AbortController();
  for (const client of [ec2, autoscaling, sts]) refuseOnceClosed(client, closed.signal);
  // Without a recorder the stacks stay as the SDK builds them (the benchmarks measure those).
  const calls = options.cloudCalls;
  if (calls) for (const client of [ec2, autoscaling, sts]) countCalls(client, calls);
  return {
    region,
    ec2,
    autoscaling,
    sts,
    destroy() {
      closed.abort(
        new DOMException('the AWS clients were closed (the controller is stopping)', 'AbortError'),
      );
      // Closes every connection, those of calls in flight included; their retries then meet the guard.
      ec2.destroy();
      autoscaling.destroy();
      sts.destroy();
    },
  };
}

/**
 * Fails every attempt once the clients are destroyed. Destroying a client closes its connections, but
 * the SDK retries a call whose connection closed under it, on a new one: a call in flight against a
 * hung endpoint would reconnect and keep the process alive after its shutdown. The error is an
 * `AbortError`, which the SDK does not retry. In the `finalizeRequest` step after the retry
 * middleware, so every attempt passes it.
 */
function refuseOnceClosed(client: MiddlewareHost, closed: AbortSignal): void {
  client.middlewareStack.add(
    (next) => async (args) => {
      closed.throwIfAborted();
      return next(args);
    },
    { step: 'finalizeRequest', name: 'kopsControllerRefuseOnceClosed', priority: 'low' },
  );
}

/**
 * The SDK's logger: its warnings in the controller's log, its failed calls at debug level (each
 * caller maps and reports its own failures once: a batch's routine `InvalidInstanceID.NotFound` or a
 * refresh denied every minute is no error line each time); no `info`, on purpose.
 * The SDK's logger middleware builds an info record of every successful call only when its logger
 * has `info`, and building it walks the whole answer to redact it (every instance of a
 * DescribeInstances: about a tenth of the SDK's CPU per join in the aws storm, docs/performance.md),
 * which the SDK's default no-op logger then drops. Its record of a failed call carries the call's
 * input and the whole error; only the command and the error's name and status are logged.
 * The SDK's types want every level; it calls each one as `logger.info?.()`.
 */
export function sdkLogger(logger: Logger): SdkLogger {
  const levels = {
    debug: () => undefined,
    warn: (...content: unknown[]) => logger.warn({ sdk: content.map(String).join(' ') }, 'AWS SDK warning'),
    error: (record: unknown) => {
      const { commandName, error, metadata } = (record ?? {}) as SdkFailure;
      logger.debug(
        { command: commandName, err: error?.name ?? String(record), status: metadata?.httpStatusCode },
        'AWS call failed',
      );
    },
  };
  return levels as unknown as SdkLogger;
}

/** The logger an SDK client is configured with. */
type SdkLogger = NonNullable<EC2ClientConfig['logger']>;

/** What the SDK's logger middleware logs of a failed call (the parts read). */
interface SdkFailure {
  commandName?: string;
  error?: { name?: string };
  metadata?: { httpStatusCode?: number };
}

/** What a middleware sees of a command: the SDK names it (`DescribeInstancesCommand`). */
interface CommandContext {
  commandName?: string;
}
/** A middleware that passes the request and the answer through untouched. */
type PassThrough = <A, R>(next: (args: A) => Promise<R>, context: CommandContext) => (args: A) => Promise<R>;
type Placement<Step> = { step: Step; name: string; priority: 'high' | 'low' };

/** The part of an SDK client's middleware stack {@link countCalls} uses. */
interface MiddlewareHost {
  middlewareStack: {
    add(middleware: PassThrough, options: Placement<'initialize'>): void;
    add(middleware: PassThrough, options: Placement<'finalizeRequest'>): void;
    add(middleware: PassThrough, options: Placement<'deserialize'>): void;
  };
}

/** The result of one request: the SDK throws the service's error, named by its code, from `deserialize`. */
function awsCallResult(err: unknown): CloudCallResult {
  if (isAwsThrottling(err)) return 'throttled';
  const status = (err as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode;
  // A 4xx is AWS answering (not found, access denied); no status is a connection that failed.
  return status !== undefined && status >= 400 && status < 500 ? 'rejected' : 'error';
}

/**
 * Counts the client's requests and times its calls. The counter sits in the `deserialize` step,
 * inside the retry middleware, so it sees every attempt, throttled ones included, which the retries
 * would otherwise hide; the timer sits in `initialize`, outside the retries, and measures what the
 * caller waited, back-off and the adaptive rate limiter included.
 */
function countCalls(client: MiddlewareHost, calls: CloudCallRecorder): void {
  const callOf = (context: CommandContext) => (context.commandName ?? 'unknown').replace(/Command$/, '');
  client.middlewareStack.add(
    (next, context) => async (args) => {
      const call = callOf(context);
      try {
        const output = await next(args);
        calls.request('aws', call, 'ok');
        return output;
      } catch (err) {
        calls.request('aws', call, awsCallResult(err));
        throw err;
      }
    },
    { step: 'deserialize', name: 'kopsControllerCloudRequests', priority: 'high' },
  );
  client.middlewareStack.add(
    (next, context) => async (args) => {
      const started = performance.now();
      try {
        return await next(args);
      } finally {
        calls.duration('aws', callOf(context), secondsSince(started));
      }
    },
    { step: 'initialize', name: 'kopsControllerCloudCallDuration', priority: 'high' },
  );
}
