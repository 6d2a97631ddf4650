/**
 * `aws`: kops-compatible cloud-attested bootstrap. The node proves it holds its instance profile's
 * credentials with a signed STS GetCallerIdentity bound to the request body (see aws-sts-proof.ts);
 * the controller checks freshness (stricter than STS's 15 minutes), replays it to STS, and accepts
 * only an `assumed-role/<node role>/<instance-id>` session of our account. Node name, SANs and
 * instance group then come from EC2's record of that instance. STS refusing the signature and EC2's
 * verdict on the instance are denials; STS or EC2 failing, throttling or not answering in time are
 * dependency faults (503, the node retries).
 *
 * No replay marker is written: the signature covers `X-Kops-Request-Sha`, the hash of this body, and
 * STS checks the signature, so the proof passes with no other request on any replica. The same
 * request presented again is answered again, as the marker's retry rule would (it can only certify
 * the keys in that body). A marker could refuse nothing the binding has not already refused, and it
 * cost every join an API-server write and a ConfigMap (docs/security.md, "AWS").
 */

import { isIP } from 'node:net';
import type { InstanceIdentity } from '../../cloud/aws/instance.ts';
import { parseAmzDate } from '../../cloud/aws/sigv4.ts';
import { fipsFromEnv, stsHost } from '../../cloud/aws/sts-host.ts';
import type { CloudCallRecorder } from '../../cloud/metrics.ts';
import { withDeadline } from '../../deadline.ts';
import { describeError, KopsError, UnavailableError } from '../../errors.ts';
import type { Logger } from '../../log.ts';
import { quoted } from '../../quote.ts';
import { type CircuitBreaker, circuitOf } from '../circuit-breaker.ts';
import { defaultCloudLookupTimeoutMs, dependencyFault, isCloudVerdict } from '../dependency.ts';
import type { BootstrapPolicy, NodeFacts, PolicyDecision } from '../types.ts';
import { parseStsProof, type StsReplayRequest } from './aws-sts-proof.ts';
import { describeAge } from './proof-age.ts';
import { type StsCaller, StsClient } from './sts-client.ts';

/** Looks an instance up by id in EC2 (AwsNodeIdentifier.lookupInstance); throws a typed error. */
export interface AwsInstanceLookup {
  lookupInstance(instanceId: string): Promise<InstanceIdentity>;
}

/** Options of the `aws` policy. */
export interface AwsPolicyOptions {
  /** Our account and partition (from the controller's own GetCallerIdentity at start-up). */
  account: string;
  partition: string;
  region: string;
  /** Expect proofs for the region's FIPS STS endpoint (default: as the environment asks, `AWS_USE_FIPS_ENDPOINT`). */
  fips?: boolean;
  /** IAM role names whose instance sessions may bootstrap (`server.provider.aws.nodesRoles`). */
  nodesRoles: readonly string[];
  useIPBasedNodeNames?: boolean;
  instances: AwsInstanceLookup;
  /** Where to replay proofs (default `https://<regional STS host>`; the simulator's endpoint in tests). */
  stsEndpoint?: string;
  /** How old (or how far in the future) a signature may be (default 5 minutes). */
  maxAgeMs?: number;
  /** Timeout of the STS call (default 5 s). */
  stsTimeoutMs?: number;
  /** Deadline of the EC2 lookup, the SDK's retries included (default 10 s). */
  lookupTimeoutMs?: number;
  /** Where the STS replays are counted (default: nowhere). */
  cloudCalls?: CloudCallRecorder;
  /**
   * How long after EC2 first answers that it has no instance of a verified session's id that answer is
   * taken for EC2's eventual consistency (a dependency fault: the node retries) rather than a verdict
   * (default 5 minutes).
   */
  notFoundGraceMs?: number;
  /** Monotonic milliseconds, the clock of that grace (default `performance.now`). */
  monotonic?: () => number;
  /** Where pausing and resuming STS replays is said (circuit-breaker.ts); default nowhere. */
  logger?: Logger;
  /** The circuit of STS replays (default: one of the policy's own, with the breaker's defaults). */
  circuit?: CircuitBreaker;
}

/** Default freshness window of a proof. */
export const defaultAwsProofMaxAgeMs = 5 * 60 * 1000;

function deny(...reasons: string[]): PolicyDecision {
  return { verdict: 'deny', reasons };
}

/** Default of {@link AwsPolicyOptions.notFoundGraceMs}: AWS speaks of "up to a few minutes". */
export const defaultNotFoundGraceMs = 5 * 60 * 1000;

/** Instance ids remembered at most: a bound on what sessions of unknown instances can make it keep. */
const maxRememberedNotFound = 10_000;

/**
 * When EC2 first answered that it has no instance of each id a verified session named. EC2's API is
 * eventually consistent: just after launch it may answer `InvalidInstanceID.NotFound` for an instance
 * that exists, which kops' nodeup rides out by retrying; a denial here would end the join for good.
 * Per replica and bounded (the oldest ids go first; an id forgotten only starts its grace again).
 */
class FirstNotFound {
  readonly #since = new Map<string, number>();

  /** Whether a NotFound for `instanceId` at `now` is within `graceMs` of the first one. */
  withinGrace(instanceId: string, now: number, graceMs: number): boolean {
    let first = this.#since.get(instanceId);
    if (first === undefined) {
      if (this.#since.size >= maxRememberedNotFound) {
        const oldest = this.#since.keys().next().value;
        if (oldest !== undefined) this.#since.delete(oldest);
      }
      first = now;
      this.#since.set(instanceId, now);
    }
    return now - first < graceMs;
  }

  /** EC2 lists the instance now. */
  found(instanceId: string): void {
    this.#since.delete(instanceId);
  }
}

/** The kops `aws` policy; abstains for requests without an AWS proof. */
export function awsPolicy(options: AwsPolicyOptions): BootstrapPolicy {
  const host = stsHost(options.region, { fips: options.fips ?? fipsFromEnv() });
  const endpoint = options.stsEndpoint ?? `https://${host}`;
  const maxAgeMs = options.maxAgeMs ?? defaultAwsProofMaxAgeMs;
  const notFoundGraceMs = options.notFoundGraceMs ?? defaultNotFoundGraceMs;
  const notFound = new FirstNotFound();
  // A grace is a duration: on the wall clock, a step forward would end it early (a denial of an
  // instance that is just launching) and a step back would stretch it.
  const monotonic = options.monotonic ?? (() => performance.now());
  const sts = new StsClient(endpoint, {
    timeoutMs: options.stsTimeoutMs ?? 5_000,
    ...(options.cloudCalls ? { cloudCalls: options.cloudCalls } : {}),
    circuit: options.circuit ?? circuitOf('STS', options),
  });
  return {
    name: 'aws',
    evaluate: async (request, context) => {
      const { proof } = request;
      if (proof.kind !== 'aws-sts')
        return { verdict: 'abstain', reasons: ['the request carries no AWS proof'] };
      let replay: StsReplayRequest;
      try {
        replay = parseStsProof(proof.version, proof.token, request.body, host);
      } catch (err) {
        return deny((err as Error).message);
      }
      const now = context.now();
      const signedAt = parseAmzDate(replay.claims.amzDate);
      if (!signedAt) return deny(`the proof's X-Amz-Date ${quoted(replay.claims.amzDate)} is malformed`);
      const age = now.getTime() - signedAt.getTime();
      if (Math.abs(age) > maxAgeMs) {
        return deny(
          `the proof was signed at ${signedAt.toISOString()}, ${describeAge(age)}; ` +
            `proofs are accepted within ${maxAgeMs / 1000} s of this controller's clock (check the node's clock)`,
        );
      }
      if (replay.claims.scope.region !== options.region) {
        return deny(
          `the proof is signed for region ${quoted(replay.claims.scope.region)}, not ${options.region}`,
        );
      }
      let caller: StsCaller;
      try {
        caller = await sts.call(replay.request);
      } catch (err) {
        // Only STS refusing the signature is about the node; the rest is STS failing.
        if (err instanceof KopsError && err.kind === 'unauthenticated')
          return deny(`STS did not accept the proof: ${describeError(err)}`);
        throw dependencyFault('sts', err);
      }
      const checked = checkCaller(caller, options);
      if (typeof checked !== 'object') return deny(checked);
      let instance: InstanceIdentity;
      try {
        instance = await withDeadline(
          options.instances.lookupInstance(checked.instanceId),
          options.lookupTimeoutMs ?? defaultCloudLookupTimeoutMs,
          `EC2 DescribeInstances ${checked.instanceId}`,
        );
      } catch (err) {
        if (!isCloudVerdict(err)) throw dependencyFault('ec2', err);
        // STS has vouched for a live session of this instance's role named after the instance: a
        // NotFound soon after is most likely EC2 not listing it yet. Never an approval, only a retry.
        const { instanceId } = checked;
        if (
          err instanceof KopsError &&
          err.kind === 'not-found' &&
          notFound.withinGrace(instanceId, monotonic(), notFoundGraceMs)
        ) {
          throw dependencyFault(
            'ec2',
            new UnavailableError(
              `EC2 does not list instance ${instanceId} yet (its API is eventually consistent just after a launch)`,
              { cause: err, retryAfterSeconds: 10 },
            ),
          );
        }
        return deny(`EC2 does not vouch for ${instanceId}: ${describeError(err)}`);
      }
      notFound.found(checked.instanceId);
      const facts = factsOf(instance, options, {
        account: caller.account,
        arn: caller.arn,
        role: checked.role,
        stsVersion: String(replay.version),
        signedAt: signedAt.toISOString(),
      });
      return {
        verdict: 'approve',
        facts,
        reasons: [
          `STS says the caller is ${caller.arn}; EC2 says ${instance.instanceId} is a running instance of group ${instance.instanceGroup}`,
        ],
      };
    },
  };
}

/** Checks the STS answer: our account, an instance session of an allowed role; a reason string when not. */
export function checkCaller(
  caller: StsCaller,
  options: Pick<AwsPolicyOptions, 'account' | 'partition' | 'nodesRoles'>,
): { role: string; instanceId: string } | string {
  if (caller.account !== options.account) {
    return `the proof is from AWS account ${caller.account}, not this cluster's account ${options.account}`;
  }
  const parts = caller.arn.split(':');
  if (
    parts.length !== 6 ||
    parts[0] !== 'arn' ||
    parts[1] !== options.partition ||
    parts[2] !== 'sts' ||
    parts[3] !== '' ||
    parts[4] !== options.account
  ) {
    return `caller ${caller.arn} is not an STS session of ${options.partition} account ${options.account}`;
  }
  const resource = (parts[5] as string).split('/');
  if (resource.length !== 3 || resource[0] !== 'assumed-role') {
    return `caller ${caller.arn} is not an assumed-role session (instance profile)`;
  }
  const [, role, instanceId] = resource as [string, string, string];
  if (!options.nodesRoles.includes(role)) {
    return `role ${role} is not one of the node roles allowed to bootstrap (${options.nodesRoles.join(', ') || 'none configured'})`;
  }
  if (!/^i-(?:[0-9a-f]{8}|[0-9a-f]{17})$/.test(instanceId)) {
    return `session ${instanceId} of role ${role} is not named after an EC2 instance`;
  }
  return { role, instanceId };
}

/** `ip-10-0-0-5.ec2.internal` (us-east-1) or `ip-10-0-0-5.<region>.compute.internal`. */
export function ipBasedNodeName(ipv4: string, region: string): string {
  const domain = region === 'us-east-1' ? 'ec2.internal' : `${region}.compute.internal`;
  return `ip-${ipv4.replaceAll('.', '-')}.${domain}`;
}

/** The node facts of a verified instance: SANs from EC2's addresses, as kops. */
export function factsOf(
  instance: InstanceIdentity,
  options: Pick<AwsPolicyOptions, 'region' | 'useIPBasedNodeNames'>,
  evidence: Record<string, string>,
): NodeFacts {
  const ips = new Set<string>();
  const names = new Set<string>([instance.instanceId]);
  for (const { type, address } of instance.addresses) {
    if ((type === 'InternalIP' || type === 'ExternalIP') && isIP(address)) ips.add(address);
    if (type === 'InternalDNS') names.add(address.toLowerCase());
  }
  const privateIpv4 = instance.addresses.find(
    (a) => a.type === 'InternalIP' && isIP(a.address) === 4,
  )?.address;
  const ipName = privateIpv4 ? ipBasedNodeName(privateIpv4, options.region) : undefined;
  if (ipName) names.add(ipName);
  const nodeName = options.useIPBasedNodeNames && ipName ? ipName : instance.instanceId;
  return {
    nodeName,
    instanceGroup: instance.instanceGroup,
    instanceId: instance.instanceId,
    // The instance its certificates name, so that an IP-based name's next instance is another machine.
    ...(instance.incarnation ? { incarnationId: instance.incarnation.id } : {}),
    // The instance id and private DNS names whichever is the node's name, as kops' certificate names.
    dnsNames: [...names],
    ipAddresses: [...ips],
    evidence: { ...evidence, instanceId: instance.instanceId, zone: instance.zone },
  };
}
