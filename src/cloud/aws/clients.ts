/**
 * The AWS SDK clients the controller uses, configured once: the region (configured or from IMDS),
 * adaptive retries (the SDK's client-side rate limiter backs off when EC2 answers
 * `RequestLimitExceeded`), an endpoint override for the simulator or a VPC endpoint, and a count of
 * every request each client sends (kops_controller_cloud_requests_total), and the SDK's warnings in
 * the controller's log.
 */
import { AutoScalingClient } from '@aws-sdk/client-auto-scaling';
import { EC2Client, type EC2ClientConfig } from '@aws-sdk/client-ec2';
import { STSClient } from '@aws-sdk/client-sts';
import { type Logger, silentLogger } from '../../log.ts';
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

/** Builds the EC2, Auto Scaling and STS clients. */
export async function createAwsClients(options: AwsClientOptions = {}): Promise<AwsClients> {
  const region = await resolveRegion(options.region, options.imds);
  const config = {
    region,
    retryMode: 'adaptive',
    maxAttempts: options.maxAttempts ?? 8,
    logger: sdkLogger(options.logger ?? silentLogger),
    ...(options.endpoint === undefined ? {} : { endpoint: options.endpoint }),
    ...(options.credentials === undefined ? {} : { credentials: options.credentials }),
  };
  const ec2 = new EC2Client(config);
  const autoscaling = new AutoScalingClient(config);
  const sts = new STSClient(config);
  // Without a recorder the stacks stay as the SDK builds them (the benchmarks measure those).
  const calls = options.cloudCalls;
  if (calls) for (const client of [ec2, autoscaling, sts]) countCalls(client, calls);
  return {
    region,
    ec2,
    autoscaling,
    sts,
    destroy() {
      ec2.destroy();
      autoscaling.destroy();
      sts.destroy();
    },
  };
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
type Placement<Step> = { step: Step; name: string; priority: 'high' };

/** The part of an SDK client's middleware stack {@link countCalls} uses. */
interface MiddlewareHost {
  middlewareStack: {
    add(middleware: PassThrough, options: Placement<'initialize'>): void;
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
