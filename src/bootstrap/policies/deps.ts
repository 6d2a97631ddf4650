/**
 * Builds what the configured approval policies depend on — cloud clients, the token store, the
 * inventory, the replay guard — and only that: a chain of `[queue]` needs no cloud at all. Used by
 * the controller at start-up and by `explain`.
 */
import type { CoreV1Api, KubeConfig, V1Node } from '@kubernetes/client-node';
import { azureScopeOf, type CloudOverrides, cloudFromConfig } from '../../cloud/from-config.ts';
import { type HostLookup, HostRegistry } from '../../cloud/metal/hosts.ts';
import { InventoryStore } from '../../cloud/metal/inventory.ts';
import type { CloudCallRecorder } from '../../cloud/metrics.ts';
import type { NodeIdentifier } from '../../cloud/types.ts';
import type { Config } from '../../config/schema.ts';
import { ConfigError, NotFoundError } from '../../errors.ts';
import { type Logger, silentLogger } from '../../log.ts';
import type { CertificateAuthority } from '../../pki/ca.ts';
import type { Vfs } from '../../statestore/types.ts';
import { dependencyFault } from '../dependency.ts';
import { httpsNodeReader } from '../node-guard.ts';
import { ConfigMapReplayGuard, MemoryReplayGuard, type ReplayGuard } from '../replay-guard.ts';
import { apiTokenSource, TokenValidator } from '../tokens.ts';
import type { BootstrapTokenValidator } from '../types.ts';
import { awsAccountAtStartup, type PolicyDeps, policySpecsOf } from './build.ts';
import { type MetalRegistries, metalAddresses } from './metal-addresses.ts';
import { cloudAddresses, type NodeAddresses } from './renewal.ts';

/** Where the dependencies come from. */
export interface PolicyDepsOptions {
  config: Config;
  /** The apiserver: bootstrap tokens, and the replay guard shared by replicas. */
  core?: CoreV1Api;
  /** The cluster CA (policy renewal). */
  ca?: CertificateAuthority;
  /**
   * The API server connection: kops metal's Host objects (policy pki-tpm), and the Node a renewal's
   * addresses are looked up by (policy renewal).
   */
  kubeConfig?: KubeConfig;
  /** How long the renewal policy waits for a Node's providerID (default 10 s). */
  renewalNodeReadTimeoutMs?: number;
  /** Checks bootstrap tokens (the controller passes one over its token watch); default: reads through `core`. */
  tokens?: BootstrapTokenValidator;
  /** Overrides the replay guard (`explain` keeps its own, so a dry run spends nothing in the cluster). */
  replayGuard?: ReplayGuard;
  /** The state store at configBase (the metal inventory). */
  stateStore?: Vfs;
  cloud?: CloudOverrides;
  serverUrl?: string;
  logger?: Logger;
  /** Where the cloud clients and the policies count their calls (the controller's metrics; default: nowhere). */
  cloudCalls?: CloudCallRecorder;
  /** Counts the renewal policy's verdicts on certificates that name no machine (the controller's metrics). */
  countUnmarkedRenewal?: (verdict: 'approve' | 'deny') => void;
}

/** The names of the policies the chain uses, including those webhooks verify with. */
export function policyNamesOf(config: Config): Set<string> {
  const names = new Set<string>();
  for (const spec of policySpecsOf(config)) {
    names.add(spec.name);
    if (spec.name === 'webhook' && spec.verifiedBy) names.add(spec.verifiedBy);
  }
  return names;
}

/** Builds the dependencies of the configured chain; `close` releases cloud connections. */
export async function policyDepsFromConfig(
  options: PolicyDepsOptions,
): Promise<{ deps: PolicyDeps; close(): void }> {
  const { config, core, logger = silentLogger } = options;
  const names = policyNamesOf(config);
  const closers: (() => void)[] = [];
  const counted = options.cloudCalls ? { cloudCalls: options.cloudCalls } : {};
  const deps: PolicyDeps = {
    replayGuard:
      options.replayGuard ??
      (core
        ? new ConfigMapReplayGuard({
            core,
            ...(options.kubeConfig ? { kubeConfig: options.kubeConfig } : {}),
            namespace: config.bootstrap.replayNamespace,
          })
        : new MemoryReplayGuard()),
    logger,
    ...(options.serverUrl === undefined ? {} : { serverUrl: options.serverUrl }),
    ...counted,
    ...(options.countUnmarkedRenewal ? { countUnmarkedRenewal: options.countUnmarkedRenewal } : {}),
    ...(names.has('bootstrap-token') || names.has('metal')
      ? options.tokens
        ? { tokens: options.tokens }
        : core
          ? { tokens: new TokenValidator(apiTokenSource(core), logger) }
          : {}
      : {}),
  };
  // The cloud identifiers the policies' providers built, by cloud: the renewal policy reuses the
  // configured cloud's rather than building a second provider.
  const identifiers: Partial<Record<Config['cloud'], NodeIdentifier>> = {};
  // The `metal` policy's inventory, which the renewal policy shares (one poll of the state store).
  let metalInventory: InventoryStore | undefined;
  try {
    if (names.has('aws')) {
      const region = config.server?.provider.aws?.Region;
      const { createAwsProvider } = await import('../../cloud/aws/provider.ts');
      const aws = await createAwsProvider({
        clusterName: config.clusterName,
        ...(region ? { region } : {}),
        ...options.cloud?.aws,
        logger,
        ...counted,
      });
      closers.push(() => aws.clients.destroy());
      const { account, partition } = await awsAccountAtStartup(aws.clients.sts, { logger });
      deps.aws = { account, partition, region: aws.clients.region, instances: aws.nodeIdentifier };
      identifiers.aws = aws.nodeIdentifier;
    }
    if (names.has('gce')) {
      const { createGceProvider } = await import('../../cloud/gce/provider.ts');
      const gce = await createGceProvider({
        project: config.server?.provider.gce?.projectID,
        clusterName: config.server?.provider.gce?.clusterName ?? config.clusterName,
        ...options.cloud?.gce,
        logger,
        ...counted,
      });
      deps.gce = { identifier: gce.nodeIdentifier, compute: gce.compute };
      identifiers.gce = gce.nodeIdentifier;
    }
    // Each callback cloud in the chain checks its ids against its own cloud's API.
    for (const cloud of idOnlyClouds.filter((name) => names.has(name))) {
      const provider = await idOnlyProvider(cloud, config, options, logger);
      closers.push(() => provider.close());
      deps.cloudIdentifiers = { ...deps.cloudIdentifiers, [cloud]: provider.nodeIdentifier };
      identifiers[cloud] = provider.nodeIdentifier;
    }
    if (names.has('openstack')) {
      const { createOpenStackProvider } = await import('../../cloud/openstack/provider.ts');
      const openstack = createOpenStackProvider({
        clusterName: config.clusterName,
        ...options.cloud?.openstack,
        logger,
        ...counted,
      });
      deps.openstack = { nova: openstack.nova };
      identifiers.openstack = openstack.nodeIdentifier;
    }
    if (names.has('scaleway')) {
      const { createScalewayProvider } = await import('../../cloud/scaleway/provider.ts');
      const scaleway = await createScalewayProvider({
        clusterName: config.clusterName,
        ...options.cloud?.scaleway,
        logger,
        ...counted,
      });
      deps.scaleway = { clients: scaleway.clients };
      identifiers.scaleway = scaleway.nodeIdentifier;
    }
    if (names.has('azure')) {
      const { createAzureProvider } = await import('../../cloud/azure/provider.ts');
      const azure = await createAzureProvider({
        ...azureScopeOf(config),
        ...options.cloud?.azure,
        logger,
        ...counted,
      });
      deps.azure = { client: azure.client };
      identifiers.azure = azure.nodeIdentifier;
    }
    if (names.has('pki-tpm')) {
      if (!options.kubeConfig) {
        throw new ConfigError(
          'approval policy pki-tpm needs the Kubernetes API (its Host objects in kops-system): pass a kubeconfig',
        );
      }
      deps.hosts = new HostRegistry(options.kubeConfig);
    }
    if (names.has('metal')) {
      if (!options.stateStore) {
        throw new ConfigError('approval policy metal needs the inventory in the state store: set configBase');
      }
      metalInventory = new InventoryStore({ vfs: options.stateStore, logger });
      deps.inventory = metalInventory;
    }
    if (names.has('renewal')) {
      const renewal = await renewalDeps(config, options, logger, {
        built: identifiers[config.cloud],
        metal: metalRegistriesOf(config, { hosts: deps.hosts, inventory: metalInventory }, options, logger),
      });
      deps.ca = renewal.ca;
      if (renewal.addresses) {
        closers.push(renewal.close);
        deps.renewalAddresses = renewal.addresses;
      }
    }
  } catch (err) {
    for (const close of closers) close();
    throw err;
  }
  return {
    deps,
    close: () => {
      for (const close of closers) close();
    },
  };
}

/** The callback clouds whose policies need only the cloud's node identifier. */
const idOnlyClouds = ['hetzner', 'digitalocean', 'linode'] as const;

async function idOnlyProvider(
  cloud: (typeof idOnlyClouds)[number],
  config: Config,
  options: PolicyDepsOptions,
  logger: Logger,
): Promise<{ nodeIdentifier: NodeIdentifier; close(): void }> {
  const base = {
    clusterName: config.clusterName,
    logger,
    ...(options.cloudCalls ? { cloudCalls: options.cloudCalls } : {}),
  };
  switch (cloud) {
    case 'hetzner':
      return (await import('../../cloud/hetzner/provider.ts')).createHetznerProvider({
        ...base,
        ...options.cloud?.hetzner,
      });
    case 'digitalocean':
      return (await import('../../cloud/digitalocean/provider.ts')).createDigitalOceanProvider({
        ...base,
        ...options.cloud?.digitalocean,
      });
    case 'linode':
      return (await import('../../cloud/linode/provider.ts')).createLinodeProvider({
        ...base,
        ...options.cloud?.linode,
      });
  }
}

/**
 * The metal registries the configured chain trusts, which a renewal finds a host without a
 * providerID in (metal-addresses.ts): kops' Host objects when the chain has `pki-tpm` (the same
 * HostRegistry), and the inventory when the chain has `metal` (the same store; required) or the
 * cloud is metal with a state store (on `cloud: metal` the CSR approver and the node labeller read it;
 * optional: kops metal clusters enrol with Hosts and usually have none). Undefined when none is.
 */
function metalRegistriesOf(
  config: Config,
  built: { hosts: HostLookup | undefined; inventory: InventoryStore | undefined },
  options: PolicyDepsOptions,
  logger: Logger,
): MetalRegistries | undefined {
  const inventory = built.inventory
    ? { store: built.inventory, required: true }
    : config.cloud === 'metal' && options.stateStore
      ? { store: new InventoryStore({ vfs: options.stateStore, logger }), required: false }
      : undefined;
  if (!built.hosts && !inventory) return undefined;
  return { ...(built.hosts ? { hosts: built.hosts } : {}), ...(inventory ? { inventory } : {}) };
}

/**
 * The renewal policy's CA, and where the addresses of a renewed serving certificate come from (see
 * `renewalAddressSource`): on metal, the metal registries the chain trusts; on a cloud, the
 * configured cloud's current record of the Node's providerID — read through `sources.built`, the
 * identifier a policy's provider already made for this cloud, else a provider of its own — and, for
 * a Node without one, the metal registries (kops' `Metal` feature flag: hosts enrolled with `Host`
 * objects beside a cloud's instances). Without the API server's connection (`kubeConfig`), or on
 * metal without any registry, renewals carry no addresses: client certificates only.
 */
async function renewalDeps(
  config: Config,
  options: PolicyDepsOptions,
  logger: Logger,
  sources: { built: NodeIdentifier | undefined; metal: MetalRegistries | undefined },
): Promise<{
  ca: CertificateAuthority;
  addresses?: (nodeName: string) => Promise<NodeAddresses>;
  close(): void;
}> {
  if (!options.ca)
    throw new ConfigError('approval policy renewal needs the cluster CA, which is not configured');
  const { kubeConfig } = options;
  if (!kubeConfig) return { ca: options.ca, close: () => undefined };
  const byName = sources.metal && metalAddresses(sources.metal);
  const readOptions =
    options.renewalNodeReadTimeoutMs === undefined
      ? {}
      : { nodeReadTimeoutMs: options.renewalNodeReadTimeoutMs };
  if (config.cloud === 'metal') {
    // The metal "cloud" is the inventory, and it says nothing of a host the Hosts enrol, nor whether
    // a host runs: a renewal on metal goes by name through the registries only (metal-addresses.ts).
    if (!byName) return { ca: options.ca, close: () => undefined };
    return {
      ca: options.ca,
      addresses: renewalAddressSource(kubeConfig, { byName }, readOptions),
      close: () => undefined,
    };
  }
  let identifier = sources.built;
  let close = (): void => undefined;
  if (!identifier) {
    const cloud = await cloudFromConfig(
      config,
      options.stateStore,
      options.cloud,
      logger,
      options.cloudCalls,
    );
    identifier = cloud.nodeIdentifier;
    close = () => cloud.close();
  }
  const addresses = renewalAddressSource(
    kubeConfig,
    { identifier, ...(byName ? { byName } : {}) },
    readOptions,
  );
  return { ca: options.ca, addresses, close };
}

/**
 * A renewal's addresses as the controller finds them: the Node, read through the pooled Node reader
 * (src/bootstrap/node-guard.ts) within `nodeReadTimeoutMs` (default 10 s); then, when it has a
 * providerID and a cloud `identifier` is given, the cloud (`cloudAddresses`), else the node's name
 * in the metal registries (`byName`); a Node without a providerID that no registry can look up is
 * refused (`cloudAddresses`: no providerID). A Node that is not registered (404: removed, or never
 * there) is a NotFoundError — a denial; any failure of the read (a 5xx, a 429, a 403 to the
 * controller, no answer in time) is a fault of the API server (503), never a verdict on the node.
 */
function renewalAddressSource(
  kubeConfig: KubeConfig,
  sources: { identifier?: NodeIdentifier; byName?: (nodeName: string) => Promise<NodeAddresses> },
  options: { nodeReadTimeoutMs?: number } = {},
): (nodeName: string) => Promise<NodeAddresses> {
  const readNode = httpsNodeReader(kubeConfig, { timeoutMs: options.nodeReadTimeoutMs ?? 10_000 });
  return async (nodeName) => {
    // The reader's type names what the guard uses; the object read is the whole Node.
    const node = (await readNode(nodeName).catch((err: unknown) => {
      throw dependencyFault('kubernetes-api', err);
    })) as Pick<V1Node, 'spec'> | undefined;
    if (!node) throw new NotFoundError(`node ${nodeName} is not registered`);
    const providerID = node.spec?.providerID || undefined;
    if (sources.byName && !(providerID && sources.identifier)) return sources.byName(nodeName);
    if (!sources.identifier) throw new NotFoundError(`node ${nodeName} has no providerID`);
    return cloudAddresses({ providerIdOf: async () => providerID, identifier: sources.identifier })(nodeName);
  };
}
