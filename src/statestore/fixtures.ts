/**
 * The sample clusters under `fixtures/` (kops v1alpha2 YAML, one file per object as kops stores them):
 * `aws` is minimal.example.com with a control plane and two node groups, `gce` is
 * minimal-gce.example.com. Tests and `kops-controller dev` seed state stores from them.
 */
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { ClusterSeed } from './cluster-store.ts';
import { parseCluster } from './kops-types.ts';

/** The names of the sample clusters. */
export const sampleClusterNames = ['aws', 'gce'] as const;
export type SampleClusterName = (typeof sampleClusterNames)[number];

const fixturesDir = join(import.meta.dirname, 'fixtures');

/** A sample cluster: its name and its objects, ready for `seedClusterStore`. */
export interface SampleCluster extends ClusterSeed {
  /** The cluster name, which is also its configBase under the state-store root. */
  name: string;
}

/** Reads one sample cluster's YAML files. */
export async function loadSampleCluster(sample: SampleClusterName): Promise<SampleCluster> {
  const dir = join(fixturesDir, sample);
  const cluster = await readFile(join(dir, 'cluster.yaml'), 'utf8');
  const files = (await readdir(join(dir, 'instancegroup'))).filter((f) => f.endsWith('.yaml')).sort();
  const instanceGroups = await Promise.all(files.map((f) => readFile(join(dir, 'instancegroup', f), 'utf8')));
  return { name: parseCluster(cluster, `fixture ${sample}`).metadata.name, cluster, instanceGroups };
}

/** The path of a sample cluster's fixture file, e.g. `fixturePath('aws', 'cluster.yaml')`. */
export function fixturePath(sample: SampleClusterName, ...parts: string[]): string {
  return join(fixturesDir, sample, ...parts);
}
