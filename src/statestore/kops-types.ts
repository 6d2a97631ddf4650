/**
 * The kops Cluster and InstanceGroup objects, as far as this controller reads them, parsed from the
 * kops v1alpha2 YAML in the state store. kops has hundreds of fields: unknown ones are kept and
 * ignored, but every field read here is type-checked and errors name the file and field path.
 * Version differences are normalised on the way in: `role: Master` becomes `ControlPlane`,
 * `masterKubelet` becomes `controlPlaneKubelet`, and v1alpha3's object `cloudProvider` and
 * `networking.subnets` are accepted.
 */
import { type Document, parseAllDocuments } from 'yaml';
import { z } from 'zod';
import { InvalidInputError } from '../errors.ts';
import { labelKeyProblem, labelValueProblem } from '../label-syntax.ts';
import { formatIssuePath, yamlAttempt, yamlSyntaxProblem } from '../parse-problems.ts';

/** The kops API versions accepted. */
export const kopsApiVersions = ['kops.k8s.io/v1alpha2', 'kops.k8s.io/v1alpha3'] as const;

/** Instance-group roles after normalisation (`Master` is read as `ControlPlane`). */
export const instanceGroupRoles = ['ControlPlane', 'APIServer', 'Node', 'Bastion'] as const;
export type InstanceGroupRole = (typeof instanceGroupRoles)[number];

const stringMap = z.record(z.string(), z.string());

/** A map of Kubernetes labels; keys and values are checked against the label syntax. */
const labelMap = stringMap.superRefine((labels, ctx) => {
  for (const [key, value] of Object.entries(labels)) {
    const problem = labelKeyProblem(key) ?? labelValueProblem(value);
    if (problem) ctx.addIssue({ code: 'custom', path: [key], message: problem });
  }
});

const objectMeta = z.looseObject({
  name: z.string().min(1, 'must not be empty'),
  labels: stringMap.optional(),
  annotations: stringMap.optional(),
  creationTimestamp: z.union([z.string(), z.date()]).nullish(),
});

const kubeletConfig = z.looseObject({
  nodeLabels: labelMap.optional(),
  taints: z.array(z.string()).optional(),
});

const roleSchema = z
  .enum(['Master', 'ControlPlane', 'APIServer', 'Node', 'Bastion'], {
    error: (issue) =>
      `${issue.input === undefined ? 'required' : `unknown role ${JSON.stringify(issue.input)}`}: ` +
      'use one of Master (or ControlPlane), APIServer, Node, Bastion',
  })
  .transform((role): InstanceGroupRole => (role === 'Master' ? 'ControlPlane' : role));

const size = z.number().int().nonnegative();

const instanceGroupSpec = z
  .looseObject({
    role: roleSchema,
    minSize: size.optional(),
    maxSize: size.optional(),
    nodeLabels: labelMap.optional(),
    taints: z.array(z.string()).optional(),
    cloudLabels: stringMap.optional(),
    kubelet: kubeletConfig.optional(),
    subnets: z.array(z.string()).optional(),
    zones: z.array(z.string()).optional(),
    machineType: z.string().optional(),
    image: z.string().optional(),
    manager: z.enum(['CloudGroup', 'Karpenter']).optional(),
  })
  .superRefine((spec, ctx) => {
    if (spec.minSize !== undefined && spec.maxSize !== undefined && spec.maxSize < spec.minSize) {
      ctx.addIssue({
        code: 'custom',
        path: ['maxSize'],
        message: `must be at least minSize (${spec.minSize})`,
      });
    }
  });

const clusterSubnet = z.looseObject({
  name: z.string().min(1),
  zone: z.string().optional(),
  region: z.string().optional(),
  cidr: z.string().optional(),
  type: z.string().optional(),
});

/** v1alpha2 writes `cloudProvider: aws`; v1alpha3 writes `cloudProvider: {aws: {...}}`. */
const cloudProvider = z.union([
  z.string(),
  z.record(z.string(), z.unknown()).refine((o) => Object.keys(o).length === 1, 'must name exactly one cloud'),
]);

const clusterSpec = z
  .looseObject({
    cloudProvider: cloudProvider.optional(),
    configBase: z.string().optional(),
    kubernetesVersion: z.string().optional(),
    cloudLabels: stringMap.optional(),
    subnets: z.array(clusterSubnet).optional(),
    networking: z.looseObject({ subnets: z.array(clusterSubnet).optional() }).optional(),
    kubelet: kubeletConfig.optional(),
    masterKubelet: kubeletConfig.optional(),
    controlPlaneKubelet: kubeletConfig.optional(),
  })
  .transform(({ cloudProvider, masterKubelet, controlPlaneKubelet, subnets, networking, ...rest }) => ({
    ...rest,
    ...(networking ? { networking } : {}),
    cloudProvider: typeof cloudProvider === 'string' ? cloudProvider : Object.keys(cloudProvider ?? {})[0],
    controlPlaneKubelet: controlPlaneKubelet ?? masterKubelet,
    subnets: subnets ?? networking?.subnets,
  }));

const typeMeta = { apiVersion: z.enum(kopsApiVersions) };

const clusterSchema = z.looseObject({
  ...typeMeta,
  kind: z.literal('Cluster'),
  metadata: objectMeta,
  spec: clusterSpec,
});
const instanceGroupSchema = z.looseObject({
  ...typeMeta,
  kind: z.literal('InstanceGroup'),
  metadata: objectMeta,
  spec: instanceGroupSpec,
});

/** A kops Cluster (normalised). */
export type Cluster = z.output<typeof clusterSchema>;
/** A kops InstanceGroup (normalised). */
export type InstanceGroup = z.output<typeof instanceGroupSchema>;

/** Everything found in one kops YAML text. */
export interface KopsObjects {
  clusters: Cluster[];
  instanceGroups: InstanceGroup[];
}

/** Removes null-valued keys, as Go's YAML decoding leaves such fields unset (`nodeLabels:` alone). */
function dropNulls(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(dropNulls);
  if (value === null || typeof value !== 'object' || value instanceof Date) return value;
  return Object.fromEntries(
    Object.entries(value)
      .filter(([, v]) => v !== null)
      .map(([k, v]) => [k, dropNulls(v)]),
  );
}

function describeIssues(error: z.ZodError, prefix: (string | number)[]): string {
  return error.issues
    .map(
      (issue) =>
        `${formatIssuePath([...prefix, ...issue.path])}: ${issue.message.replace(/^Invalid (input|option): /, '')}`,
    )
    .join('; ');
}

function validate<T>(schema: z.ZodType<T>, raw: unknown, source: string, document: number): T {
  const result = schema.safeParse(raw);
  if (result.success) return result.data;
  const where = document > 0 ? `${source} (document ${document + 1})` : source;
  throw new InvalidInputError(`${where}: ${describeIssues(result.error, [])}`, {
    details: {
      source,
      issues: result.error.issues.map((i) => ({ path: formatIssuePath(i.path), message: i.message })),
    },
  });
}

/**
 * A parsed document's value; what stops its expansion ({@link yamlAttempt}: an alias to no anchor, an
 * alias bomb, nesting that overflows the stack) is invalid input naming the file, as a syntax error is.
 */
function documentValue(doc: Pick<Document, 'toJS'>, document: number, source: string): unknown {
  const result = yamlAttempt((): unknown => doc.toJS());
  if ('value' in result) return result.value;
  const where = document > 0 ? `${source} (document ${document + 1})` : source;
  throw new InvalidInputError(`${where}: ${result.problem}`, { cause: result.cause, details: { source } });
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * The text of a kops object read from the store: UTF-8, as kops writes it and as kops' YAML decoder
 * requires (it refuses other bytes). Bytes that are not UTF-8 are refused naming the file, rather than
 * read with replacement characters.
 */
export function kopsText(data: Uint8Array, source: string): string {
  try {
    return utf8.decode(data);
  } catch (err) {
    throw new InvalidInputError(
      `${source}: not UTF-8 text; kops objects are UTF-8 YAML (kops itself refuses this file)`,
      { cause: err, details: { source } },
    );
  }
}

/** Parses YAML text that may hold several `---`-separated kops objects. */
export function parseKopsObjects(text: string, source = 'input'): KopsObjects {
  const parsed = yamlAttempt(() => parseAllDocuments(text, { uniqueKeys: true, prettyErrors: true }));
  if ('problem' in parsed) {
    throw new InvalidInputError(`${source}: ${parsed.problem}`, { cause: parsed.cause, details: { source } });
  }
  const documents = parsed.value;
  if (!Array.isArray(documents)) {
    throw new InvalidInputError(`${source}: not a YAML document stream`);
  }
  const out: KopsObjects = { clusters: [], instanceGroups: [] };
  documents.forEach((doc, index) => {
    const problem = yamlSyntaxProblem(doc, source);
    if (problem) throw new InvalidInputError(problem);
    const raw: unknown = dropNulls(documentValue(doc, index, source));
    if (raw === null || raw === undefined) return; // an empty document between separators
    if (typeof raw !== 'object' || Array.isArray(raw)) {
      throw new InvalidInputError(`${source}: expected a kops object (a mapping with apiVersion and kind)`);
    }
    const { kind, apiVersion } = raw as { kind?: unknown; apiVersion?: unknown };
    if (kind === 'Cluster') out.clusters.push(validate(clusterSchema, raw, source, index));
    else if (kind === 'InstanceGroup')
      out.instanceGroups.push(validate(instanceGroupSchema, raw, source, index));
    else {
      throw new InvalidInputError(
        `${source}: kind ${JSON.stringify(kind)} (apiVersion ${JSON.stringify(apiVersion)}) is not a kops ` +
          'Cluster or InstanceGroup',
      );
    }
  });
  return out;
}

function single<T>(items: T[], kind: string, source: string): T {
  if (items.length !== 1) {
    throw new InvalidInputError(`${source}: expected exactly one ${kind}, found ${items.length}`);
  }
  return items[0] as T;
}

/** Parses a kops Cluster; the text must hold exactly one. */
export function parseCluster(text: string, source = 'cluster'): Cluster {
  return single(parseKopsObjects(text, source).clusters, 'Cluster', source);
}

/** Parses a kops InstanceGroup; the text must hold exactly one. */
export function parseInstanceGroup(text: string, source = 'instance group'): InstanceGroup {
  return single(parseKopsObjects(text, source).instanceGroups, 'InstanceGroup', source);
}
