/**
 * The kops-controller configuration. The keys kops itself generates (`cmd/kops-controller/pkg/config`)
 * are accepted exactly as kops writes them, including the capitalised `Listen`, `Region` and
 * `MaxTimeSkew`; sections this implementation adds (`metrics`, `leaderElection`) use the same
 * camelCase style. Unknown keys are errors so that a typo never silently disables a setting.
 */
import { z } from 'zod';
import { isAwsRegionName } from '../cloud/aws/region-name.ts';
import { type ServingSettings, servingSettingsProblems } from '../controllers/csr-approver/serving-policy.ts';
import { defaultPollIntervalMs } from '../statestore/cluster-store.ts';
import { parseDuration } from './duration.ts';

/** A duration given as a Go duration string or a number of seconds; parsed to milliseconds. */
const duration = z.union([z.string(), z.number()]).transform((value, ctx) => {
  try {
    return parseDuration(value);
  } catch (err) {
    ctx.addIssue({ code: 'custom', message: (err as Error).message });
    return z.NEVER;
  }
});

/**
 * A {@link duration} of at most `max` (a duration string, parsed once). The bounds keep each setting
 * sane (a standby that waits days to take over, a node's request held for hours) and well below
 * 2^31-1 ms, past which Node fires a timer at once.
 */
function durationAtMost(max: string) {
  const maxMs = parseDuration(max);
  return duration.refine((ms) => ms <= maxMs, { message: `must be at most ${max}` });
}
/** Leader election's timings: client-go's are seconds; an hour is far beyond any failover worth waiting for. */
const leaderElectionDuration = durationAtMost('1h');
/** The deadline of a call a node's request waits for: its client gives up long before. */
const requestCallTimeout = durationAtMost('5m');
/**
 * How old a proof may be: STS honours a signature for 15 minutes, and a proof older than that is a
 * replay waiting to happen, not a slow node. It is also the clock skew tolerated on a GCE token's
 * dates, which must stay well inside the token's hour.
 */
const proofAge = durationAtMost('15m');
/** kops' `MaxTimeSkew` (seconds), bounded as {@link proofAge}. */
const maxTimeSkew = z.number().int().nonnegative().max(900, { message: 'must be at most 900 (15 minutes)' });

/** A listen address: ":port", "host:port" or "[v6]:port", the port 0-65535 (0: any free port). */
export const listenAddress = z
  .string()
  .regex(
    /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]*):\d{1,5}$/,
    'expected a listen address such as ":3988" or "127.0.0.1:3988"',
  )
  .superRefine((address, ctx) => {
    const port = Number(address.slice(address.lastIndexOf(':') + 1));
    if (port > 65_535) ctx.addIssue({ code: 'custom', message: `port ${port} is out of range (0-65535)` });
  });

const awsVerifier = z.strictObject({
  nodesRoles: z.array(z.string().min(1)).default([]),
  Region: z.string().refine(isAwsRegionName, 'must be an AWS region such as us-east-1').optional(),
  useIPBasedNodeNames: z.boolean().optional(),
});

const gceVerifier = z.strictObject({
  projectID: z.string().min(1),
  region: z.string().optional(),
  clusterName: z.string().optional(),
  MaxTimeSkew: maxTimeSkew.optional(),
});

/**
 * By this share of leaseDuration after its last successful renewal the leader's work must have stopped
 * (src/kube/leader-election.ts). A standby takes the lease over no earlier than one leaseDuration after
 * it saw that renewal, on its own clock, so the rest is the margin for clocks that run at different
 * rates: the guarantee holds while no replica's clock runs more than 1 / 0.9 ≈ 1.11 times as fast as
 * the leader's.
 */
export const stopDeadlineFraction = 0.9;

/**
 * The shortest retryPeriod accepted. client-go refuses only a retryPeriod below 1 ns, but with 0 or a
 * few nanoseconds the leader renews its Lease in a loop (over 200 writes a second against the API
 * server); 100 ms still allows the fast failovers of tests while bounding the load to 10 writes a second.
 */
export const minRetryPeriodMs = 100;

/**
 * client-go's JitterFactor, which src/kube/leader-election.ts applies to retries too: as client-go's
 * NewLeaderElector, renewDeadline must exceed this many retryPeriods, so that the leader has a retry
 * left after one failed renewal.
 */
export const retryJitterFactor = 1.2;

/** Providers kops knows but this implementation does not verify; accepted so kops configs load. */
const emptyProvider = z.strictObject({});

const serverProviders = z.strictObject({
  aws: awsVerifier.optional(),
  gce: gceVerifier.optional(),
  hetzner: emptyProvider.optional(),
  openstack: emptyProvider.optional(),
  do: emptyProvider.optional(),
  scaleway: emptyProvider.optional(),
  linode: emptyProvider.optional(),
  azure: z
    .strictObject({
      clusterName: z.string().optional(),
      /** This implementation's: the ARM scope; default IMDS's answer for the controller's VM, as kops. */
      subscriptionID: z.string().min(1).optional(),
      resourceGroup: z.string().min(1).optional(),
    })
    .optional(),
});

const serverOptions = z.strictObject({
  Listen: listenAddress.default(':3988'),
  provider: serverProviders.default({}),
  pki: z.strictObject({ MaxTimeSkew: maxTimeSkew.optional() }).optional(),
  serverKeyPath: z.string().optional(),
  serverCertificatePath: z.string().optional(),
  caBasePath: z.string().optional(),
  signingCAs: z.array(z.string().min(1)).optional(),
  certNames: z.array(z.string().min(1)).optional(),
  // Older kops versions wrote this here; true means instance-id node names, this implementation's AWS default.
  useInstanceIDForNodeName: z.boolean().optional(),
});

const leaderElection = z.strictObject({
  enabled: z.boolean().default(true),
  namespace: z.string().min(1).default('kube-system'),
  name: z.string().min(1).default('kops-controller-leader'),
  leaseDuration: leaderElectionDuration.default(15_000),
  renewDeadline: leaderElectionDuration.default(10_000),
  retryPeriod: leaderElectionDuration.default(2_000),
});

const stateStore = z.strictObject({
  /**
   * How often the cluster spec and the instance groups in use are checked for changes: one HEAD (a
   * metadata GET on GCS, a stat for file://) per object per poll; an edited group's nodes are
   * relabelled within this interval plus their patches.
   */
  pollInterval: duration
    .refine((ms) => ms >= 1_000 && ms <= 3_600_000, { message: 'must be between 1s and 1h' })
    .default(defaultPollIntervalMs),
});

const metrics = z.strictObject({
  /** Where `/metrics`, `/healthz` and `/readyz` are served. */
  listen: listenAddress.default(':3987'),
});

/** A JavaScript regular expression, checked when the configuration loads. */
const regex = z.string().refine(
  (source) => {
    try {
      new RegExp(source);
      return true;
    } catch {
      return false;
    }
  },
  { message: 'must be a valid regular expression' },
);

/** One approval policy of the bootstrap chain, by name, with its options. */
export const bootstrapPolicySpec = z.discriminatedUnion('name', [
  z.strictObject({ name: z.literal('always-reject') }),
  z.strictObject({ name: z.literal('insecure-always-approve') }),
  z.strictObject({ name: z.literal('queue') }),
  z.strictObject({
    name: z.literal('bootstrap-token'),
    /** The names token holders may claim (matched in full), e.g. `worker-[0-9]+`. */
    nodeNamePattern: regex.optional(),
  }),
  z.strictObject({
    name: z.literal('aws'),
    /** How old a signed STS proof may be. */
    maxProofAge: proofAge.default(300_000),
    /** Where proofs are replayed (default: the regional STS endpoint). */
    stsEndpoint: z.url().optional(),
    stsTimeout: requestCallTimeout.default(5_000),
  }),
  z.strictObject({
    name: z.literal('gce'),
    /** The audience identity tokens must carry (default: the bootstrap server URL). */
    audience: z.string().min(1).optional(),
    /** How old an identity token or TPM proof may be (default: server.provider.gce.MaxTimeSkew, else 5m). */
    maxProofAge: proofAge.optional(),
    /** Where Google's token keys are published (default Google's JWKS). */
    jwksUrl: z.url().optional(),
  }),
  z.strictObject({
    name: z.literal('metal'),
    /** What an inventory host that shows no valid bootstrap token gets. */
    withoutToken: z.enum(['queue', 'deny']).default('queue'),
  }),
  z.strictObject({
    /**
     * kops metal: `x-pki-tpm` proofs signed with the key registered in the host's `Host` object
     * (`kops-system/<host>`); the clock skew allowed is `server.pki.MaxTimeSkew`.
     */
    name: z.literal('pki-tpm'),
  }),
  z.strictObject({
    /**
     * A node renews with its current kubelet client certificate as proof (`join --renew`); the
     * addresses of a renewed serving certificate come from the cloud. In every default chain.
     */
    name: z.literal('renewal'),
    /** How far the proof's timestamp may be from the controller's clock (default 5m). */
    maxSkew: duration.optional(),
    /**
     * A presented certificate that names no machine, where the cloud names the machine of now:
     * `allow` renews it unless it starts 48 h 5 min before that machine; `refuse` never does.
     */
    unmarked: z.enum(['allow', 'refuse']).default('allow'),
  }),
  z.strictObject({
    /** kops Hetzner: `x-hetzner-id`, checked with the Cloud API, then the callback. */
    name: z.literal('hetzner'),
    /** Deadline of the cloud lookup, retries included. */
    lookupTimeout: requestCallTimeout.default(10_000),
  }),
  z.strictObject({
    /** kops DigitalOcean: `x-digitalocean-droplet-id`, checked with the API, then the callback. */
    name: z.literal('digitalocean'),
    lookupTimeout: requestCallTimeout.default(10_000),
  }),
  z.strictObject({
    /** kops Linode: `x-linode-instance-id`, checked with the API, then the callback. */
    name: z.literal('linode'),
    lookupTimeout: requestCallTimeout.default(10_000),
  }),
  z.strictObject({
    /** kops OpenStack: `x-openstack-id`, checked with Nova and the request's source address. */
    name: z.literal('openstack'),
    /** Deadline of the Nova lookup, retries included. */
    lookupTimeout: requestCallTimeout.default(10_000),
  }),
  z.strictObject({
    /** kops Scaleway: `x-scaleway-instance-server-id`, checked with the Instance API and IPAM, then the callback. */
    name: z.literal('scaleway'),
    /** Deadline of the Instance API and IPAM lookups, retries included. */
    lookupTimeout: requestCallTimeout.default(10_000),
  }),
  z.strictObject({
    /** kops Azure: `x-azure-id` with IMDS's attested document, checked against ARM, then the callback. */
    name: z.literal('azure'),
    /** How old an attested document may be (its `createdOn`). */
    maxProofAge: proofAge.default(300_000),
    /** PEM roots the document's signer must chain to (default: Node's public roots). */
    rootsFile: z.string().min(1).optional(),
    /** PEM intermediates to use before fetching them from the PKI repository. */
    intermediatesFile: z.string().min(1).optional(),
    /** Where missing intermediates are fetched (default Microsoft's PKI repository). */
    pkiRepository: z.url().optional(),
  }),
  z.strictObject({
    name: z.literal('webhook'),
    url: z.url({ protocol: /^https$/, error: 'must be an https:// URL' }),
    /** PEM files: the CA bundle of the webhook's server, and our client certificate and key. */
    caFile: z.string().min(1),
    certFile: z.string().min(1),
    keyFile: z.string().min(1),
    timeout: requestCallTimeout.default(5_000),
    /** The policy whose verified facts the webhook reviews. */
    verifiedBy: z
      .enum([
        'aws',
        'gce',
        'openstack',
        'scaleway',
        'azure',
        'hetzner',
        'digitalocean',
        'linode',
        'pki-tpm',
        'metal',
        'bootstrap-token',
      ])
      .optional(),
  }),
]);

const bootstrap = z.strictObject({
  /** The approval chain, in order; default by provider: aws → [aws], gce → [gce], server.pki → [pki-tpm]. */
  policies: z.array(bootstrapPolicySpec).optional(),
  /** Where used proofs are recorded (one-time use across replicas). */
  replayNamespace: z.string().min(1).default('kube-system'),
  /**
   * Where the impersonation guard learns that a Node is not registered: `watch` (a current watch of
   * Nodes, with a direct read whenever it is not current or knows the Node) or `api` (a direct read on
   * every request, as kops does).
   */
  nodeGuard: z.enum(['watch', 'api']).default('watch'),
  /**
   * The API server URLs nodes are told to use: the first in bootstrap answers, all of them in the
   * published cluster-info (default `https://api.internal.<clusterName>`, as kops).
   */
  apiServers: z
    .array(z.url({ protocol: /^https$/, error: 'expected an https:// URL of the API server' }))
    .min(1)
    .optional(),
  /** Bounds on requests waiting for a human (defaults in src/bootstrap/queue.ts). */
  queue: z
    .strictObject({
      /** Undecided requests in all; beyond it a new request gets 429 `queue-full`. */
      maxPending: z.number().int().positive().optional(),
      /** Undecided requests per source (an IPv4 address or an IPv6 /64); beyond it 429 `source-queue-full`. */
      maxPendingPerSource: z.number().int().positive().optional(),
      /** After this an undecided request is marked Failed (reason Expired) and audited. */
      pendingTTL: duration.refine((ms) => ms >= 60_000, { message: 'must be at least 1m' }).optional(),
    })
    .default({}),
});

/**
 * The checks of one `csrApprover.serving` field (servingSettingsProblems), made on the field itself
 * rather than on the object: zod skips an object's refinement when any of its fields fails to parse,
 * so one field of the wrong type would hide every other bad one from the error line.
 */
function servingCheck<K extends keyof ServingSettings>(field: K) {
  return (value: ServingSettings[K], ctx: z.RefinementCtx): void => {
    for (const { message } of servingSettingsProblems({ [field]: value })) {
      ctx.addIssue({ code: 'custom', message });
    }
  };
}

/**
 * The two ways of the CSR approver with kubelet client renewals (src/controllers/csr-approver):
 * `approve` one whose node's instance runs, or `leave` it pending for a human.
 */
export const clientRenewalModes = ['approve', 'leave'] as const;
export type ClientRenewalMode = (typeof clientRenewalModes)[number];

const csrApprover = z.strictObject({
  /** Approve kubelet client renewals and cloud-verified serving certificates (needs node identity). */
  enabled: z.boolean().default(true),
  /** Leave kubelet CSRs that fail a check pending for a human instead of denying them. */
  leaveUnverifiedForHumans: z.boolean().default(false),
  /** The oldest cloud answer about a node's instance that a decision may rest on (default 60 s). */
  maxInstanceStateAge: duration.default(60_000),
  /**
   * What becomes of a kubelet client renewal (`kube-apiserver-client-kubelet`) from a node: `approve`
   * it when the node's instance runs, or `leave` it pending for a human. Unset: by cloud, see
   * {@link clientRenewalsOf}.
   */
  clientRenewals: z.enum(clientRenewalModes).optional(),
  /** kubelet-csr-approver's settings for kubelet serving CSRs; one left unset adds no check of its own. */
  serving: z
    .strictObject({
      /** Every DNS name must match this regular expression in full (case-insensitive). */
      dnsNamePattern: z.string().min(1).superRefine(servingCheck('dnsNamePattern')).optional(),
      /** Every IP address must be in one of these CIDRs. */
      ipPrefixes: z.array(z.string()).min(1).superRefine(servingCheck('ipPrefixes')).optional(),
      /** A longer `spec.expirationSeconds` is denied (not capped: an approver cannot change a request). */
      maxExpiration: duration.superRefine(servingCheck('maxExpiration')).optional(),
      /** Every DNS name must resolve, and only to allowed addresses. */
      namesMustResolve: z.boolean().default(false),
    })
    .default({ namesMustResolve: false }),
});

/**
 * What the CSR approver does with kubelet client renewals: the setting, else by cloud. The approver
 * cannot tell which machine's certificate authenticated a CSR (src/controllers/csr-approver/csr-approver.ts),
 * so an approval rests on the node's name and whichever machine bears it now. That is sound only where
 * a name is never given to another machine: AWS with instance-id node names (this controller's AWS
 * default; EC2 never reuses an instance id), so `approve` there. Everywhere else a name outlives its
 * machine — GCE names instances (a MIG recreates one under its name), IP-based AWS names follow the
 * address, servers and metal hosts are re-created under their names, Cluster API on AWS names nodes by
 * private DNS name — so `leave`. kops' nodes never renew through the CSR API (nodeup writes the
 * kubelet a kubeconfig with kops-controller's certificate; the kubelet's `rotateCertificates` is
 * off unless set, and kops runs no approver for these requests), so leaving them costs a kops
 * cluster nothing; nodes renew through the bootstrap server (`join --renew`), which is bound to
 * the machine.
 */
export function clientRenewalsOf(config: {
  cloud: string;
  capi?: { enabled?: boolean | undefined } | undefined;
  server?: { provider: { aws?: { useIPBasedNodeNames?: boolean | undefined } | undefined } } | undefined;
  csrApprover: { clientRenewals?: ClientRenewalMode | undefined };
}): ClientRenewalMode {
  if (config.csrApprover.clientRenewals) return config.csrApprover.clientRenewals;
  const namesNeverReused =
    config.cloud === 'aws' && !config.capi?.enabled && !config.server?.provider.aws?.useIPBasedNodeNames;
  return namesNeverReused ? 'approve' : 'leave';
}

export const supportedClouds = [
  'aws',
  'gce',
  'metal',
  'openstack',
  'digitalocean',
  'hetzner',
  'azure',
  'scaleway',
  'linode',
] as const;

/**
 * Settings kops can write that this controller would otherwise accept and not act on: each is refused
 * with a line naming it and what to do, because a setting silently ignored is a difference the
 * operator never learns about. (Settings that do nothing when false are fine either way.)
 */
function unactionable(config: {
  cacheNodeidentityInfo?: boolean | undefined;
  discovery?: { enabled?: boolean | undefined } | undefined;
  server?: { useInstanceIDForNodeName?: boolean | undefined } | undefined;
}): { path: string[]; message: string }[] {
  const refused: { path: string[]; message: string }[] = [];
  if (config.cacheNodeidentityInfo === false) {
    refused.push({
      path: ['cacheNodeidentityInfo'],
      message:
        'false cannot be honoured: this controller always caches node identity (trust decisions re-read it within csrApprover.maxInstanceStateAge); remove the setting',
    });
  }
  if (config.discovery?.enabled) {
    refused.push({
      path: ['discovery', 'enabled'],
      message:
        'gossip discovery (k8s.local clusters) is not implemented: no gossip records are published; give the API server and this server DNS names or a load balancer, and remove discovery.enabled',
    });
  }
  if (config.server?.useInstanceIDForNodeName === false) {
    refused.push({
      path: ['server', 'useInstanceIDForNodeName'],
      message:
        'false (node names from the private DNS name) is not supported: remove it for instance-id names, or set server.provider.aws.useIPBasedNodeNames: true for IP-based names',
    });
  }
  return refused;
}

export const configSchema = z
  .strictObject({
    clusterName: z.string().min(1),
    cloud: z.enum(supportedClouds),
    configBase: z.string().min(1).optional(),
    secretStore: z.string().min(1).optional(),
    server: serverOptions.optional(),
    /** kops' node-identity cache switch; this controller always caches (see unactionable below). */
    cacheNodeidentityInfo: z.boolean().optional(),
    /** Sets `spec.podCIDRs` of new nodes from the cloud (src/controllers/ipam). */
    enableCloudIPAM: z.boolean().optional(),
    capi: z.strictObject({ enabled: z.boolean().optional() }).optional(),
    // Older kops wrote this for gossip (k8s.local) clusters; refused when enabled (unactionable below).
    discovery: z.strictObject({ enabled: z.boolean().optional() }).optional(),
    stateStore: stateStore.default(stateStore.parse({})),
    leaderElection: leaderElection.default(leaderElection.parse({})),
    metrics: metrics.default(metrics.parse({})),
    bootstrap: bootstrap.default(bootstrap.parse({})),
    csrApprover: csrApprover.default(csrApprover.parse({})),
  })
  .superRefine((config, ctx) => {
    for (const { path, message } of unactionable(config)) ctx.addIssue({ code: 'custom', path, message });
    if (config.enableCloudIPAM && !['aws', 'gce', 'metal'].includes(config.cloud)) {
      ctx.addIssue({
        code: 'custom',
        path: ['enableCloudIPAM'],
        message: `kops-controller has cloud IPAM for aws, gce and metal only, not ${config.cloud} (as kops)`,
      });
    }
    if (config.server?.useInstanceIDForNodeName && config.server.provider.aws?.useIPBasedNodeNames) {
      ctx.addIssue({
        code: 'custom',
        path: ['server', 'useInstanceIDForNodeName'],
        message: 'contradicts server.provider.aws.useIPBasedNodeNames: nodes are named either way, not both',
      });
    }
    const le = config.leaderElection;
    if (le.renewDeadline >= le.leaseDuration * stopDeadlineFraction) {
      ctx.addIssue({
        code: 'custom',
        path: ['leaderElection', 'renewDeadline'],
        message: `must be shorter than ${stopDeadlineFraction} × leaseDuration: the leader's components stop in between, before another replica can take the lease`,
      });
    }
    if (le.retryPeriod < minRetryPeriodMs) {
      ctx.addIssue({
        code: 'custom',
        path: ['leaderElection', 'retryPeriod'],
        message: `must be at least ${minRetryPeriodMs}ms: the leader renews and candidates retry every retryPeriod, so a shorter one writes the Lease in a loop`,
      });
    } else if (le.renewDeadline <= retryJitterFactor * le.retryPeriod) {
      // Also covers retryPeriod >= renewDeadline, which would leave no renewal attempt in time at all.
      ctx.addIssue({
        code: 'custom',
        path: ['leaderElection', 'retryPeriod'],
        message: `renewDeadline must be longer than ${retryJitterFactor} × retryPeriod (${Number((retryJitterFactor * le.retryPeriod).toFixed(3))} ms), or the leader cannot retry a failed renewal before it steps down`,
      });
    }
  });

/** The validated configuration, with defaults filled in and durations in milliseconds. */
export type Config = z.output<typeof configSchema>;
