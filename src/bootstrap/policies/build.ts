/**
 * Builds the configured approval chain (`bootstrap.policies`) from the configuration and the
 * dependencies the server already has (cloud clients, token store, replay guard). Without an explicit
 * chain the kops default applies: a policy for every configured `server.provider.<cloud>` and for
 * `server.pki` (`pki-tpm`, kops metal; the inventory policy `metal` is chosen explicitly), in kops'
 * order, then `renewal`.
 * A policy whose dependency is missing is a configuration error at start-up, never a silent gap.
 */
import { readFile } from 'node:fs/promises';
import { GetCallerIdentityCommand, type STSClient } from '@aws-sdk/client-sts';
import type { z } from 'zod';
import { awsCallError } from '../../cloud/aws/errors.ts';
import type { AzureClient } from '../../cloud/azure/client.ts';
import type { ComputeClient } from '../../cloud/gce/compute.ts';
import type { HostLookup } from '../../cloud/metal/hosts.ts';
import type { MetalInventory } from '../../cloud/metal/inventory.ts';
import type { CloudCallRecorder } from '../../cloud/metrics.ts';
import type { NovaClient } from '../../cloud/openstack/nova.ts';
import type { ScalewayClients } from '../../cloud/scaleway/client.ts';
import type { NodeIdentifier } from '../../cloud/types.ts';
import { bootstrapPolicySpec, type Config } from '../../config/schema.ts';
import { ConfigError, describeError, UnavailableError } from '../../errors.ts';
import { type Logger, silentLogger } from '../../log.ts';
import type { CertificateAuthority } from '../../pki/ca.ts';
import { Backoff } from '../../runtime/backoff.ts';
import { type Clock, systemClock } from '../../runtime/clock.ts';
import type { ReplayGuard } from '../replay-guard.ts';
import type { BootstrapPolicy, BootstrapTokenValidator } from '../types.ts';
import { alwaysRejectPolicy } from './always-reject.ts';
import type { AwsInstanceLookup } from './aws.ts';
import { insecureAlwaysApprovePolicy, startupWarning } from './insecure-always-approve.ts';
import { queuePolicy } from './queue.ts';
import type { NodeAddresses } from './renewal.ts';

/** One policy's configuration. */
export type PolicySpec = z.output<typeof bootstrapPolicySpec>;

/** What the policies may need; only the configured policies' dependencies are required. */
export interface PolicyDeps {
  replayGuard: ReplayGuard;
  tokens?: BootstrapTokenValidator;
  aws?: {
    /** Our account and partition: {@link awsAccountOf} the controller's own credentials. */
    account: string;
    partition: string;
    region: string;
    instances: AwsInstanceLookup;
  };
  gce?: { identifier: NodeIdentifier; compute: Pick<ComputeClient, 'getShieldedInstanceIdentity'> };
  inventory?: { current(): Promise<MetalInventory> };
  azure?: { client: AzureClient };
  /** The cluster CA: the renewal policy checks the node certificates presented against it. */
  ca?: CertificateAuthority;
  /** A node's current addresses from the cloud, for a renewed serving certificate (renewal policy). */
  renewalAddresses?: (nodeName: string) => Promise<NodeAddresses>;
  /** Counts the renewal policy's verdicts on certificates that name no machine where the cloud names one. */
  countUnmarkedRenewal?: (verdict: 'approve' | 'deny') => void;
  /**
   * The node identifier of each id-only callback cloud (hetzner, digitalocean, linode) in the chain:
   * each checks its ids against its own cloud's API, never another's.
   */
  cloudIdentifiers?: Partial<Record<'hetzner' | 'digitalocean' | 'linode', NodeIdentifier>>;
  openstack?: { nova: Pick<NovaClient, 'getServer'> };
  scaleway?: { clients: ScalewayClients };
  /** kops metal's `Host` objects (HostRegistry over the API server). */
  hosts?: HostLookup;
  /** The bootstrap server's URL, the default audience of GCE identity tokens. */
  serverUrl?: string;
  logger?: Logger;
  /** Where the policies' own calls (STS replays, Google's token keys, webhooks) are counted. */
  cloudCalls?: CloudCallRecorder;
}

/**
 * The chain to run: `bootstrap.policies`, else the kops default: one policy per configured provider
 * (see {@link providerPoliciesOf}) followed by `renewal` (so a node can renew before its certificates
 * expire). Each of these policies decides only its own proof (Authorization scheme) and abstains on
 * every other, so the order never lets one provider's policy decide another's proof.
 */
export function policySpecsOf(config: Config): PolicySpec[] {
  if (config.bootstrap.policies) return config.bootstrap.policies;
  const providers = providerPoliciesOf(config);
  if (providers.length === 0) return [];
  return [...providers, 'renewal' as const].map((name) => defaultSpec(name));
}

/**
 * The policies of every configured provider, in the order kops' cmd/kops-controller/main.go appends
 * their verifiers to its chain: `server.provider.{aws, gce, hetzner, openstack, do, scaleway, azure,
 * linode}`, then `server.pki` (`pki-tpm`; kops' `Metal` feature flag sets it beside a cloud provider).
 */
function providerPoliciesOf(config: Config): PolicySpec['name'][] {
  const provider = config.server?.provider;
  const configured: [unknown, PolicySpec['name']][] = [
    [provider?.aws, 'aws'],
    [provider?.gce, 'gce'],
    [provider?.hetzner, 'hetzner'],
    [provider?.openstack, 'openstack'],
    [provider?.do, 'digitalocean'],
    [provider?.scaleway, 'scaleway'],
    [provider?.azure, 'azure'],
    [provider?.linode, 'linode'],
    [config.server?.pki, 'pki-tpm'],
  ];
  return configured.filter(([options]) => options !== undefined).map(([, name]) => name);
}

function need<T>(dep: T | undefined, policy: string, what: string): T {
  if (dep === undefined)
    throw new ConfigError(`approval policy ${policy} needs ${what}, which is not configured`);
  return dep;
}

async function readPem(path: string, what: string): Promise<string> {
  try {
    return await readFile(path, 'utf8');
  } catch (err) {
    throw new ConfigError(`${what} ${path} cannot be read: ${(err as Error).message}`, {
      cause: err,
    });
  }
}

/** Builds the chain; logs the insecure warning loudly when `insecure-always-approve` is in it. */
export async function buildPolicies(config: Config, deps: PolicyDeps): Promise<BootstrapPolicy[]> {
  const logger = deps.logger ?? silentLogger;
  const policies: BootstrapPolicy[] = [];
  for (const spec of policySpecsOf(config)) {
    policies.push(await buildPolicy(spec, config, deps));
    if (spec.name === 'insecure-always-approve') logger.warn(startupWarning());
  }
  if (policies.length === 0)
    logger.warn('no approval policy is configured: every bootstrap request is denied');
  return policies;
}

/**
 * One policy. Each policy's module (and through it its cloud's SDK) is imported only when the chain
 * names it: a controller on one cloud does not load the other clouds' clients.
 */
async function buildPolicy(spec: PolicySpec, config: Config, deps: PolicyDeps): Promise<BootstrapPolicy> {
  const counted = deps.cloudCalls ? { cloudCalls: deps.cloudCalls } : {};
  // Where the policies that call a dependency once per request say they pause and resume it.
  const logger = deps.logger ?? silentLogger;
  switch (spec.name) {
    case 'always-reject':
      return alwaysRejectPolicy();
    case 'insecure-always-approve':
      return insecureAlwaysApprovePolicy();
    case 'queue':
      return queuePolicy();
    case 'bootstrap-token': {
      const { bootstrapTokenPolicy } = await import('./bootstrap-token.ts');
      return bootstrapTokenPolicy({
        validator: need(deps.tokens, spec.name, 'the bootstrap token store'),
        ...(spec.nodeNamePattern === undefined ? {} : { nodeNamePattern: new RegExp(spec.nodeNamePattern) }),
      });
    }
    case 'aws': {
      const aws = need(deps.aws, spec.name, 'the AWS provider (server.provider.aws)');
      const { awsPolicy } = await import('./aws.ts');
      return awsPolicy({
        ...aws,
        logger,
        nodesRoles: config.server?.provider.aws?.nodesRoles ?? [],
        useIPBasedNodeNames: config.server?.provider.aws?.useIPBasedNodeNames ?? false,
        maxAgeMs: spec.maxProofAge,
        stsTimeoutMs: spec.stsTimeout,
        ...(spec.stsEndpoint === undefined ? {} : { stsEndpoint: spec.stsEndpoint }),
        ...counted,
      });
    }
    case 'gce': {
      const gce = need(deps.gce, spec.name, 'the GCE provider (server.provider.gce)');
      const project = need(
        config.server?.provider.gce?.projectID,
        spec.name,
        'server.provider.gce.projectID',
      );
      const audience = spec.audience ?? deps.serverUrl;
      const skew = config.server?.provider.gce?.MaxTimeSkew;
      const region = config.server?.provider.gce?.region;
      const { defaultGceProofMaxAgeMs, gcePolicy } = await import('./gce.ts');
      const { GceIdentityTokenVerifier, JwksKeyStore } = await import('../../cloud/gce/identity-token.ts');
      // 0, like an absent MaxTimeSkew, is the default, as server.pki.MaxTimeSkew is (kops writes 300;
      // taken literally, 0 would refuse every proof).
      const maxAgeMs = spec.maxProofAge ?? (skew ? skew * 1000 : defaultGceProofMaxAgeMs);
      return gcePolicy({
        project,
        ...(region ? { region } : {}),
        identifier: gce.identifier,
        compute: gce.compute,
        replayGuard: deps.replayGuard,
        maxAgeMs,
        ...(audience === undefined
          ? {}
          : {
              tokenVerifier: new GceIdentityTokenVerifier({
                keys: new JwksKeyStore({ ...(spec.jwksUrl ? { url: spec.jwksUrl } : {}), ...counted }),
                audience,
                projectIds: [project],
                // A token dated ahead of this clock by Google's is as fresh as one that late: one window.
                maxSkewSeconds: Math.ceil(maxAgeMs / 1000),
              }),
            }),
      });
    }
    case 'pki-tpm': {
      const skew = config.server?.pki?.MaxTimeSkew;
      const { pkiTpmPolicy } = await import('./pki-tpm.ts');
      return pkiTpmPolicy({
        hosts: need(deps.hosts, spec.name, "the API server's Host objects (kops.k8s.io/v1alpha2)"),
        replayGuard: deps.replayGuard,
        ...(skew ? { maxTimeSkewSeconds: skew } : {}),
      });
    }
    case 'metal':
      return (await import('./metal.ts')).metalPolicy({
        inventory: need(deps.inventory, spec.name, 'the metal inventory'),
        withoutToken: spec.withoutToken,
        ...(deps.tokens === undefined ? {} : { tokens: deps.tokens }),
      });
    case 'openstack':
      return (await import('./openstack.ts')).openstackPolicy({
        clusterName: config.clusterName,
        nova: need(deps.openstack, spec.name, 'the OpenStack provider (OS_* environment)').nova,
        logger,
        lookupTimeoutMs: spec.lookupTimeout,
      });
    case 'scaleway':
      return (await import('./scaleway.ts')).scalewayPolicy({
        clusterName: config.clusterName,
        clients: need(deps.scaleway, spec.name, 'the Scaleway provider (SCW_* environment)').clients,
        logger,
        lookupTimeoutMs: spec.lookupTimeout,
      });
    case 'renewal':
      return (await import('./renewal.ts')).renewalPolicy({
        clusterName: config.clusterName,
        ca: need(deps.ca, spec.name, 'the cluster CA'),
        ...(deps.renewalAddresses ? { addressesOf: deps.renewalAddresses } : {}),
        ...(spec.maxSkew === undefined ? {} : { maxSkewMs: spec.maxSkew }),
        unmarked: spec.unmarked,
        ...(deps.countUnmarkedRenewal ? { countUnmarked: deps.countUnmarkedRenewal } : {}),
      });
    case 'hetzner':
    case 'digitalocean':
    case 'linode': {
      const identifier = need(
        deps.cloudIdentifiers?.[spec.name],
        spec.name,
        `the ${spec.name} provider (server.provider.${spec.name})`,
      );
      const build = {
        hetzner: async () => (await import('./hetzner.ts')).hetznerPolicy,
        digitalocean: async () => (await import('./digitalocean.ts')).digitalOceanPolicy,
        linode: async () => (await import('./linode.ts')).linodePolicy,
      }[spec.name];
      return (await build())({ identifier, lookupTimeoutMs: spec.lookupTimeout });
    }
    case 'azure': {
      const azure = need(deps.azure, spec.name, 'the Azure provider (server.provider.azure)');
      const [rootsPem, intermediatesPem] = await Promise.all([
        spec.rootsFile === undefined ? undefined : readPem(spec.rootsFile, 'azure roots file'),
        spec.intermediatesFile === undefined
          ? undefined
          : readPem(spec.intermediatesFile, 'azure intermediates file'),
      ]);
      const { azurePolicy } = await import('./azure.ts');
      const { azureAttestationVerifier } = await import('../../cloud/azure/attestation-trust.ts');
      return azurePolicy({
        clusterName: config.server?.provider.azure?.clusterName ?? config.clusterName,
        client: azure.client,
        logger,
        attestation: azureAttestationVerifier({
          ...(rootsPem === undefined ? {} : { rootsPem }),
          ...(intermediatesPem === undefined ? {} : { intermediatesPem }),
          ...(spec.pkiRepository === undefined ? {} : { pkiUrl: spec.pkiRepository }),
          maxAgeMs: spec.maxProofAge,
          ...counted,
        }),
      });
    }
    case 'webhook': {
      const verifiedBy =
        spec.verifiedBy === undefined
          ? undefined
          : await buildPolicy(
              (config.bootstrap.policies ?? []).find((p) => p.name === spec.verifiedBy) ??
                defaultSpec(spec.verifiedBy),
              config,
              deps,
            );
      const { webhookPolicy } = await import('./webhook.ts');
      return webhookPolicy({
        url: spec.url,
        logger,
        ca: await readPem(spec.caFile, 'webhook CA bundle'),
        cert: await readPem(spec.certFile, 'webhook client certificate'),
        key: await readPem(spec.keyFile, 'webhook client key'),
        timeoutMs: spec.timeout,
        ...(verifiedBy === undefined ? {} : { verifiedBy }),
        ...counted,
      });
    }
  }
}

/** A policy with its default options, as if configured as `{name: <name>}`. */
function defaultSpec(name: PolicySpec['name']): PolicySpec {
  return bootstrapPolicySpec.parse({ name });
}

/**
 * {@link awsAccountOf}, patient: STS failing for a moment as a replica starts (a restart during an STS
 * incident) must not end the start-up at once, or the replica crashes into CrashLoopBackOff, whose
 * growing waits keep it out long after STS is back, while the running replicas answer the same
 * failure `503`. So a failure is retried with backoff (1 s doubling to 15 s) for `patienceMs` (default
 * 90 s, under the deployed liveness probe's 130 s), logged once when it starts; one that outlasts it
 * still ends the start-up (exit 69), as a missing permission or credentials never heal by waiting.
 */
export async function awsAccountAtStartup(
  sts: STSClient,
  options: {
    logger?: Logger;
    patienceMs?: number;
    clock?: Pick<Clock, 'monotonic'>;
    /** Waits between attempts (default a timer that keeps the process alive: see below). */
    sleep?: (ms: number) => Promise<void>;
  } = {},
): Promise<{ account: string; partition: string }> {
  const { logger = silentLogger, patienceMs = 90_000, clock = systemClock } = options;
  // A referenced timer: while the start-up waits, nothing else may hold the process (the API server
  // refusing the token watch too), and Node would end it with 13, an unsettled top-level await.
  const sleep = options.sleep ?? ((ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms)));
  const giveUpAt = clock.monotonic() + patienceMs;
  const backoff = new Backoff({ initialMs: 1_000, maxMs: 15_000 });
  // What STS last answered: an attempt the patience cut off says only that it was aborted.
  let answered: unknown;
  for (;;) {
    // Each attempt ends with the patience: an STS that never answers would otherwise hold one call
    // for the SDK's whole retry ladder, past the liveness probe.
    const patience = AbortSignal.timeout(Math.max(1, Math.ceil(giveUpAt - clock.monotonic())));
    try {
      const learnt = await awsAccountOf(sts, patience);
      if (backoff.failures > 0)
        logger.info({ attempts: backoff.failures + 1 }, "learnt this controller's AWS account from STS");
      return learnt;
    } catch (err) {
      // Credentials AWS refuses do not heal by waiting.
      if (awsCallError((err as Error).cause, 'GetCallerIdentity', 'none') instanceof ConfigError) throw err;
      if (!patience.aborted) answered = err;
      const wait = backoff.next();
      if (patience.aborted || clock.monotonic() + wait > giveUpAt) throw answered ?? err;
      if (backoff.failures === 1) {
        logger.warn(
          { err: describeError(err), patienceSeconds: patienceMs / 1000 },
          "cannot learn this controller's AWS account from STS yet; retrying before giving up the start-up",
        );
      }
      await sleep(wait);
    }
  }
}

/** Our AWS account and partition, from the controller's own GetCallerIdentity (as kops does at start-up). */
export async function awsAccountOf(
  sts: STSClient,
  abortSignal?: AbortSignal,
): Promise<{ account: string; partition: string }> {
  let arn: string | undefined;
  let account: string | undefined;
  try {
    ({ Arn: arn, Account: account } = await sts.send(
      new GetCallerIdentityCommand({}),
      abortSignal ? { abortSignal } : {},
    ));
  } catch (err) {
    throw new UnavailableError(
      `cannot learn this controller's AWS account from STS: ${(err as Error).message}`,
      {
        cause: err,
      },
    );
  }
  const partition = arn?.split(':')[1];
  if (!account || !partition) throw new UnavailableError('STS GetCallerIdentity returned no account or ARN');
  return { account, partition };
}
