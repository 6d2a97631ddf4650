/**
 * The leader-only components a controller config asks for, built once for `run` and `dev`: the
 * NodeController, the kubelet CSR approver and the validation metrics (the `kops_*` gauges),
 * from the config's cloud and state store.
 */
import {
  CoreV1Api,
  type KubeConfig,
  type V1CertificateSigningRequest,
  type V1Node,
} from '@kubernetes/client-node';
import type { Registry } from 'prom-client';
import { MachineIndex } from '../cloud/capi/machines.ts';
import { CapiNodeIdentifier } from '../cloud/capi/node-identifier.ts';
import { type CloudOverrides, cloudFromConfig } from '../cloud/from-config.ts';
import { cloudCallMetrics } from '../cloud/metrics.ts';
import { type Config, clientRenewalsOf } from '../config/schema.ts';
import { CsrApprover } from '../controllers/csr-approver/csr-approver.ts';
import { servingPolicyOf } from '../controllers/csr-approver/serving-policy.ts';
import { ipamControllerFromConfig } from '../controllers/ipam/from-config.ts';
import { NodeController } from '../controllers/node/node-controller.ts';
import { NodeEventRecorder } from '../controllers/node/node-event-recorder.ts';
import type { SharedInformer } from '../kube/shared-informer.ts';
import { type Logger, silentLogger } from '../log.ts';
import { ValidationMetrics } from '../metrics/validation-metrics.ts';
import { labelFeaturesOf } from '../nodelabels/build-node-labels.ts';
import type { LeaderComponent } from '../runtime/controller-runtime.ts';
import { ClusterStore } from '../statestore/cluster-store.ts';
import { openVfs, type VfsOptions } from '../statestore/open.ts';

/** What the components are built from. */
export interface LeaderComponentsOptions {
  config: Config;
  kubeConfig: KubeConfig;
  /** The process's Node watch, not started yet: the NodeController, IPAM and the gauges add their views. */
  nodes: SharedInformer<V1Node>;
  /** The process's CSR watch, not started yet: the kubelet CSR approver adds its view. */
  csrs: SharedInformer<V1CertificateSigningRequest>;
  /** How the state store is reached; `run` passes `vfsOptionsFromEnv(process.env)`. */
  vfsOptions: VfsOptions;
  /** Cloud endpoints and credentials other than the defaults (the simulator's, in `dev`). */
  cloud?: CloudOverrides;
  registry: Registry;
  logger?: Logger;
}

/** The components, and a function releasing what they hold once they have stopped. */
export interface LeaderComponents {
  components: LeaderComponent[];
  close(): void;
}

/**
 * Builds the components. A config without `configBase` runs neither the NodeController nor the CSR
 * approver (logged as a warning): nodes stay unlabelled and kubelet CSRs pending rather than the
 * controller crash-looping. With `capi.enabled` an instance the cloud places in no kops instance
 * group takes its group from its Cluster API Machine (one watch of the Machines).
 */
export async function buildLeaderComponents(options: LeaderComponentsOptions): Promise<LeaderComponents> {
  const { config, logger = silentLogger } = options;
  if (!config.configBase) {
    logger.warn(
      'configBase is not set: the NodeController and CSR approver are off; nodes will not be labelled',
    );
    return { components: [], close: () => undefined };
  }
  const vfs = openVfs(config.configBase, options.vfsOptions);
  const cloud = await cloudFromConfig(config, vfs, options.cloud, logger, cloudCallMetrics(options.registry));
  const machines = config.capi?.enabled
    ? new MachineIndex({ kubeConfig: options.kubeConfig, registry: options.registry, logger })
    : undefined;
  machines?.start();
  const identifier = machines ? new CapiNodeIdentifier(cloud.nodeIdentifier, machines) : cloud.nodeIdentifier;
  const clusterStore = new ClusterStore(vfs, {
    pollIntervalMs: config.stateStore.pollInterval,
    registry: options.registry,
    logger,
  });
  // One recorder for the Events of the NodeController and IPAM: one write rate, and names keyed
  // with what the NodeController reads of the replicas' shared key.
  let nodeController: NodeController | undefined;
  const events = new NodeEventRecorder(options.kubeConfig, {
    registry: options.registry,
    logger,
    nameKey: () => nodeController?.eventNameKey(),
  });
  nodeController = new NodeController({
    kubeConfig: options.kubeConfig,
    nodes: options.nodes,
    identifier,
    clusterStore,
    labelFeatures: labelFeaturesOf(process.env['KOPS_FEATURE_FLAGS']),
    ...(machines ? { capiDeployments: machines } : {}),
    identifyByNodeName: cloud.identifiesByNodeName,
    // The key that signs the managed-labels annotation lives beside the controller's lease.
    labelsKeyNamespace: config.leaderElection.namespace,
    events,
    registry: options.registry,
    logger,
  });
  const components: LeaderComponent[] = [nodeController];
  if (config.enableCloudIPAM) {
    // The cloud's pod ranges into spec.podCIDRs of new nodes (kops' setupCloudIPAM). The cloud's own
    // identifier, not the Cluster API wrapper: a range is only taken from an instance the cloud vouches for.
    components.push(
      await ipamControllerFromConfig({
        cloud: config.cloud,
        nodeIdentifier: cloud.nodeIdentifier,
        kubeConfig: options.kubeConfig,
        nodes: options.nodes,
        events,
        registry: options.registry,
        logger,
      }),
    );
  }
  if (config.csrApprover.enabled) {
    logger.info(
      {
        clientRenewals: clientRenewalsOf(config),
        setBy: config.csrApprover.clientRenewals
          ? 'csrApprover.clientRenewals'
          : `the default for cloud ${config.cloud}`,
      },
      'kubelet CSR approver: what becomes of kubelet client renewals through the CSR API',
    );
    components.push(
      new CsrApprover({
        kubeConfig: options.kubeConfig,
        csrs: options.csrs,
        identifier,
        identifyByNodeName: cloud.identifiesByNodeName,
        leaveUnverifiedForHumans: config.csrApprover.leaveUnverifiedForHumans,
        clientRenewals: clientRenewalsOf(config),
        maxInstanceStateAgeMs: config.csrApprover.maxInstanceStateAge,
        serving: servingPolicyOf(config.csrApprover.serving),
        registry: options.registry,
        logger,
      }),
    );
  }
  components.push(
    new ValidationMetrics({
      clusterName: config.clusterName,
      kubeConfig: options.kubeConfig,
      nodes: options.nodes,
      core: options.kubeConfig.makeApiClient(CoreV1Api),
      cloudGroups: cloud.cloudGroups,
      identifiesByNodeName: cloud.identifiesByNodeName,
      instanceGroups: () => clusterStore.instanceGroups(),
      cluster: () => clusterStore.cluster(),
      labelsKey: () => nodeController.labelsKey,
      registry: options.registry,
      logger,
    }),
  );
  return {
    components,
    close: () => {
      cloud.close();
      void machines?.stop();
    },
  };
}
