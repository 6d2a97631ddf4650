/**
 * The simulated AWS endpoint: one HTTP server on 127.0.0.1 that speaks EC2, Auto Scaling and STS on
 * their real wire protocols, so the production SDK clients work against it by endpoint override.
 * Every request must carry a valid SigV4 signature from a credential the simulator issued; the
 * service is the one the signature is scoped to, exactly as AWS routes a request by its endpoint.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { parseSigV4, type SigV4Credentials, SigV4Error } from '../../cloud/aws/sigv4.ts';
import { type Logger, silentLogger } from '../../log.ts';
import { listenOnLoopback } from '../../net/loopback.ts';
import { autoScalingNamespace, describeAutoScalingGroups, describeWarmPool } from './autoscaling.ts';
import { describeInstances, describeLaunchTemplates, ec2ErrorDocument } from './ec2.ts';
import { AwsFaults, type AwsService } from './faults.ts';
import { authorize } from './permissions.ts';
import { AwsSimError, queryErrorDocument, queryParams } from './query.ts';
import { verifySigV4 } from './sigv4-verify.ts';
import { getCallerIdentity, stsNamespace } from './sts.ts';
import { ec2NonMutatingBucket, ThrottleBucket } from './throttle.ts';
import { AwsWorld } from './world.ts';

/** How to start the simulator. */
export interface AwsSimulatorOptions {
  /** Default `us-east-1`; requests signed for another region are rejected. */
  region?: string;
  /** Default `123456789012`. */
  account?: string;
  /** Start with the EC2 request bucket on (default true; switch with `throttling.enabled`). */
  throttling?: boolean;
  /** The clock signatures are checked against and the bucket refills by (default: the real one). */
  now?: () => Date;
  logger?: Logger;
}

type Service = AwsService;

/**
 * Calls per action: those served (whatever their outcome) and those refused by throttling; served
 * `DescribeInstances` calls also by form, since a lookup by id and a listing by filter are different
 * callers' work.
 */
export class CallCounter {
  readonly #served = new Map<string, number>();
  readonly #throttled = new Map<string, number>();
  readonly #forms = new Map<string, number>();

  /** Records a call; `throttled` when the bucket refused it. */
  record(action: string, throttled = false, form?: CallForm): void {
    const map = throttled ? this.#throttled : this.#served;
    map.set(action, (map.get(action) ?? 0) + 1);
    if (form && !throttled) this.#forms.set(form, (this.#forms.get(form) ?? 0) + 1);
  }

  /** Served `DescribeInstances` calls that named instance ids, or that listed (no ids). */
  countForm(form: CallForm): number {
    return this.#forms.get(form) ?? 0;
  }

  /** Calls served for one action, or for all when none is named. */
  count(action?: string): number {
    return sumOf(this.#served, action);
  }

  /** Calls refused with `RequestLimitExceeded`, for one action or all. */
  throttled(action?: string): number {
    return sumOf(this.#throttled, action);
  }

  /** Forgets every count. */
  reset(): void {
    this.#served.clear();
    this.#throttled.clear();
    this.#forms.clear();
  }
}

/** The two forms of `DescribeInstances`: with `InstanceId.N`, or a listing (by filter or all). */
export type CallForm = 'DescribeInstances by id' | 'DescribeInstances listing';

function formOf(action: string, params: ReadonlyMap<string, string>): CallForm | undefined {
  if (action !== 'DescribeInstances') return undefined;
  return params.has('InstanceId.1') ? 'DescribeInstances by id' : 'DescribeInstances listing';
}

function sumOf(map: ReadonlyMap<string, number>, key: string | undefined): number {
  if (key !== undefined) return map.get(key) ?? 0;
  let total = 0;
  for (const n of map.values()) total += n;
  return total;
}

/** The EC2 request bucket, switchable at run time. */
export class Throttling {
  /** Whether EC2 requests draw from the bucket. */
  enabled: boolean;
  readonly bucket: ThrottleBucket;

  constructor(enabled: boolean, now?: () => number) {
    this.enabled = enabled;
    this.bucket = new ThrottleBucket({ ...ec2NonMutatingBucket, ...(now === undefined ? {} : { now }) });
  }

  /** Whether a request may proceed now. */
  admit(): boolean {
    return !this.enabled || this.bucket.take();
  }
}

/** Seeding EC2: instances and their states, launch templates and their versions. */
export type Ec2Seeding = Pick<
  AwsWorld,
  | 'addInstances'
  | 'setInstanceState'
  | 'startInstance'
  | 'removeInstance'
  | 'propagate'
  | 'instance'
  | 'instances'
  | 'addLaunchTemplate'
  | 'launchTemplate'
  | 'launchTemplates'
>;
/** Seeding Auto Scaling: groups and their members. */
export type AutoScalingSeeding = Pick<AwsWorld, 'addAutoScalingGroup' | 'autoScalingGroups'>;
/** Seeding STS: the credentials it accepts, whom they identify and the actions they may not call. */
export type StsSeeding = Pick<AwsWorld, 'addUser' | 'addInstanceProfileSession' | 'removeCredentials'>;

/** A running simulator. */
export interface AwsSimulator {
  /** `http://127.0.0.1:<port>`: the endpoint override for every service. */
  endpoint: string;
  region: string;
  account: string;
  /** Credentials of the IAM user `kops-controller`, for the controller's own clients. */
  credentials: SigV4Credentials;
  ec2: Ec2Seeding;
  autoscaling: AutoScalingSeeding;
  sts: StsSeeding;
  calls: CallCounter;
  throttling: Throttling;
  /** Injected faults: throttling, 5xx, latency or a dropped connection for the next requests to a service. */
  faults: AwsFaults;
  close(): Promise<void>;
}

const maxBodyBytes = 1024 * 1024;

function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > maxBodyBytes) {
        reject(
          new AwsSimError('RequestEntityTooLarge', `the request body exceeds ${maxBodyBytes} bytes`, 413),
        );
        req.destroy();
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

/** The service a request addresses: the one its signature is scoped to, else the one its action is of. */
function serviceOf(name: string | undefined, action: string | undefined): Service {
  if (name === 'ec2' || name === 'autoscaling' || name === 'sts') return name;
  if (action === 'DescribeInstances' || action === 'DescribeLaunchTemplates') return 'ec2';
  if (action === 'DescribeAutoScalingGroups' || action === 'DescribeWarmPool') return 'autoscaling';
  return 'sts';
}

/** How each service reports an authentication failure: EC2 has its own codes, the others SigV4's. */
function authError(service: Service, err: SigV4Error): AwsSimError {
  if (service === 'ec2') {
    return err.expired
      ? new AwsSimError('RequestExpired', `Request has expired. ${err.message}`)
      : new AwsSimError('AuthFailure', 'AWS was not able to validate the provided access credentials', 401);
  }
  const status = err.awsCode === 'IncompleteSignature' ? 400 : 403;
  return new AwsSimError(err.awsCode, err.message, status);
}

function errorDocument(service: Service, err: AwsSimError): string {
  switch (service) {
    case 'ec2':
      return ec2ErrorDocument(err.code, err.message);
    case 'autoscaling':
      return queryErrorDocument(autoScalingNamespace, err.code, err.message, err.status);
    case 'sts':
      return queryErrorDocument(stsNamespace, err.code, err.message, err.status);
  }
}

/** Starts the simulator on an ephemeral loopback port. */
export async function startAwsSimulator(options: AwsSimulatorOptions = {}): Promise<AwsSimulator> {
  const world = new AwsWorld(options.account ?? '123456789012', options.region ?? 'us-east-1');
  const credentials = world.addUser('kops-controller');
  const calls = new CallCounter();
  const now = options.now ?? (() => new Date());
  const throttling = new Throttling(
    options.throttling ?? true,
    options.now === undefined ? undefined : () => now().getTime(),
  );
  const logger = options.logger ?? silentLogger;
  const faults = new AwsFaults();

  /** What a request asks for, and of which service. */
  function routeOf(req: IncomingMessage, body: Buffer) {
    const params = queryParams(req.url ?? '/', body.toString('utf8'), req.headers['content-type']);
    const action = params.get('Action');
    const request = { method: req.method ?? 'GET', url: req.url ?? '/', headers: req.headersDistinct, body };
    let scopeService: string | undefined;
    try {
      scopeService = parseSigV4(request).scope.service;
    } catch {
      // Reported by verifySigV4, in the shape of the service the action belongs to.
    }
    return { params, action, request, service: serviceOf(scopeService, action) };
  }

  /** Answers one request; every failure becomes the error document of the service addressed. */
  function answer(route: ReturnType<typeof routeOf>): { status: number; xml: string } {
    const { params, action, request, service } = route;
    try {
      const claims = verifySigV4(request, {
        lookupSecret: (id) => world.principal(id)?.credentials,
        now,
        region: world.region,
        service,
      });
      if (action === undefined)
        throw new AwsSimError('MissingAction', 'The request must contain the parameter Action.');
      if (service === 'ec2' && !throttling.admit()) {
        calls.record(action, true);
        throw new AwsSimError('RequestLimitExceeded', 'Request limit exceeded.', 503);
      }
      calls.record(action, false, formOf(action, params));
      return { status: 200, xml: dispatch(service, action, params, claims.scope.accessKeyId) };
    } catch (caught) {
      let err: AwsSimError;
      if (caught instanceof SigV4Error) err = authError(service, caught);
      else if (caught instanceof AwsSimError) err = caught;
      else {
        logger.error({ err: caught }, 'AWS simulator: handler failed');
        err = new AwsSimError(
          'InternalFailure',
          'The request processing has failed because of an unknown error.',
          500,
        );
      }
      return { status: err.status, xml: errorDocument(service, err) };
    }
  }

  function dispatch(
    service: Service,
    action: string,
    params: ReadonlyMap<string, string>,
    accessKeyId: string,
  ) {
    // The signature was verified with this key's secret, so STS knows the caller.
    const caller = world.principal(accessKeyId);
    if (caller) authorize(caller, service, action);
    if (service === 'ec2' && action === 'DescribeInstances') return describeInstances(world, params);
    if (service === 'ec2' && action === 'DescribeLaunchTemplates')
      return describeLaunchTemplates(world, params);
    if (service === 'autoscaling' && action === 'DescribeAutoScalingGroups') {
      return describeAutoScalingGroups(world, params);
    }
    if (service === 'autoscaling' && action === 'DescribeWarmPool') return describeWarmPool(world, params);
    if (service === 'sts' && action === 'GetCallerIdentity' && caller)
      return getCallerIdentity(caller.identity);
    throw new AwsSimError('InvalidAction', `The action ${action} is not valid for this web service.`);
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let result: { status: number; xml: string };
    try {
      const route = routeOf(req, await readBody(req));
      const fault = faults.plan(route.service);
      if (fault) {
        if (fault.latencyMs > 0) await new Promise((resolve) => setTimeout(resolve, fault.latencyMs));
        if (fault.drop) {
          req.socket.destroy();
          return;
        }
      }
      result = fault?.error
        ? { status: fault.error.status, xml: errorDocument(route.service, fault.error) }
        : answer(route);
      if (fault?.rewrite) {
        const rewritten = fault.rewrite(result.xml, result.status);
        result = typeof rewritten === 'string' ? { ...result, xml: rewritten } : rewritten;
      }
    } catch (err) {
      const tooLarge =
        err instanceof AwsSimError ? err : new AwsSimError('InternalFailure', String(err), 500);
      result = { status: tooLarge.status, xml: errorDocument('sts', tooLarge) };
    }
    res.writeHead(result.status, {
      'content-type': 'text/xml;charset=UTF-8',
      'x-amzn-requestid': randomUUID(),
    });
    res.end(result.xml);
  }

  const server = createServer((req, res) => {
    void handle(req, res);
  });
  const listener = await listenOnLoopback(server);
  return {
    endpoint: listener.url,
    region: world.region,
    account: world.account,
    credentials,
    ec2: world,
    autoscaling: world,
    sts: world,
    calls,
    throttling,
    faults,
    close: listener.close,
  };
}
