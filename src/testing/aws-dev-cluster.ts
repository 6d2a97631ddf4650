/**
 * The simulated AWS cluster the controller tests run against (src/sim/dev-cluster.ts), with an AWS
 * provider pointed at it, and the helpers the labelling tests share: Nodes for simulated instances,
 * what the API server holds of them, and instance-group edits as `kops edit ig` makes them.
 */
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseDocument } from 'yaml';
import { type AwsProvider, createAwsProvider } from '../cloud/aws/provider.ts';
import type { KubeObject } from '../sim/apiserver/index.ts';
import { awsProviderID, simInstanceId } from '../sim/aws/scenario.ts';
import type { SimInstanceInput } from '../sim/aws/world.ts';
import { type DevCluster, type DevClusterOptions, startDevCluster } from '../sim/dev-cluster.ts';
import { ClusterStore } from '../statestore/cluster-store.ts';
import { openVfs, vfsOptionsFromEnv } from '../statestore/open.ts';
import type { Vfs } from '../statestore/types.ts';

export interface AwsDevCluster {
  cluster: DevCluster;
  store: DevCluster['api']['server']['store'];
  provider: AwsProvider;
  /** The cluster's state store, and a ClusterStore polling it every 100 ms. */
  vfs: Vfs;
  clusterStore: ClusterStore;
  /** A running EC2 instance of instance group `nodes-us-test-1a`, numbered `number`, added to the cloud. */
  addNodesInstance(number: number): SimInstanceInput;
  /** A Node for a simulated instance, registered with its providerID. */
  nodeOf(
    instance: SimInstanceInput,
    metadata?: { labels?: Record<string, string>; annotations?: Record<string, string> },
  ): KubeObject;
  labelsOf(name: string): Record<string, string>;
  annotationsOf(name: string): Record<string, string>;
  /** Rewrites an instance group's `spec.nodeLabels` in the state store. */
  editNodeLabels(group: string, edit: (labels: Record<string, string>) => void): Promise<void>;
  close(): Promise<void>;
}

export async function startAwsDevCluster(
  prefix: string,
  options: Omit<DevClusterOptions, 'stateDir'> = {},
): Promise<AwsDevCluster> {
  const stateDir = await mkdtemp(join(tmpdir(), prefix));
  const cluster = await startDevCluster({ stateDir, ...options });
  const store = cluster.api.server.store;
  const provider = await createAwsProvider({
    clusterName: cluster.clusterName,
    region: cluster.region,
    endpoint: cluster.aws.endpoint,
    credentials: { ...cluster.aws.credentials },
  });
  const vfs = openVfs(cluster.configBase, vfsOptionsFromEnv(cluster.env));
  const metadataOf = (name: string) => store.get('nodes', undefined, name)?.metadata;
  return {
    cluster,
    store,
    provider,
    vfs,
    clusterStore: new ClusterStore(vfs, { pollIntervalMs: 100 }),
    addNodesInstance(number) {
      const instance: SimInstanceInput = {
        id: simInstanceId(number),
        zone: 'us-test-1a',
        cluster: cluster.clusterName,
        instanceGroup: 'nodes-us-test-1a',
      };
      cluster.aws.ec2.addInstances([instance]);
      return instance;
    },
    nodeOf: (instance, metadata = {}) => ({
      apiVersion: 'v1',
      kind: 'Node',
      metadata: {
        name: instance.id,
        labels: { 'kubernetes.io/hostname': instance.id, ...metadata.labels },
        ...(metadata.annotations ? { annotations: metadata.annotations } : {}),
      },
      spec: { providerID: awsProviderID(instance) },
    }),
    labelsOf: (name) => (metadataOf(name)?.labels ?? {}) as Record<string, string>,
    annotationsOf: (name) => (metadataOf(name)?.annotations ?? {}) as Record<string, string>,
    async editNodeLabels(group, edit) {
      const path = `instancegroup/${group}`;
      const doc = parseDocument((await vfs.read(path)).data.toString('utf8'));
      const labels = (doc.getIn(['spec', 'nodeLabels']) as { toJSON(): Record<string, string> }).toJSON();
      edit(labels);
      doc.setIn(['spec', 'nodeLabels'], labels);
      await vfs.write(path, doc.toString());
    },
    async close() {
      provider.clients.destroy();
      await cluster.close();
      await rm(stateDir, { recursive: true, force: true });
    },
  };
}

/** Polls `check` every 20 ms for up to 30 s; fails naming `what`. */
export async function eventually(what: string, check: () => boolean | Promise<boolean>): Promise<void> {
  for (let i = 0; i < 1500; i++) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  assert.fail(`timed out waiting until ${what}`);
}
