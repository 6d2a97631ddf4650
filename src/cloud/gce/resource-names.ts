/**
 * Parsing of the GCE names the identifier trusts or distrusts: node providerIDs, the `created-by`
 * instance metadata a MIG writes, and instance-template URLs. Every parser validates the shape
 * strictly, so that a name can be placed in an API path or a list filter without escaping issues.
 */
import { InvalidInputError } from '../../errors.ts';

/** Project ids (including legacy domain-scoped `example.com:proj`) and project numbers. */
const projectPattern = /^(?:[a-z][a-z0-9.-]*[a-z0-9]:)?[a-z0-9][-a-z0-9]{1,61}[a-z0-9]$/;
// Zones: `<region>-<suffix>`, the region `<area>-<location><n>` (`us-central1`, `u-france-east1` in
// the S3NS universe), the suffix a letter or an AI zone's `ai1a`; a path-safe label either way.
const zonePattern = /^[a-z]+(?:-[a-z]+)*[0-9]+-[a-z][a-z0-9]{0,7}$/;
/** RFC 1035 labels: instance, MIG and template names. */
const namePattern = /^[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?$/;

/** Whether `zone` is spelt as a GCE zone (`us-central1-a`). */
export function isGceZone(zone: string): boolean {
  return zonePattern.test(zone);
}

/** Whether `name` is an RFC 1035 label, as instance, MIG and template names are. */
export function isGceName(name: string): boolean {
  return namePattern.test(name);
}

/** The parts of a `gce://<project>/<zone>/<instance>` providerID. */
export interface GceInstanceRef {
  project: string;
  zone: string;
  name: string;
}

/** Parses a GCE providerID; throws InvalidInputError naming the expected shape. */
export function parseGceProviderID(providerID: string): GceInstanceRef {
  const expected = 'expected gce://<project>/<zone>/<instance-name>';
  if (!providerID.startsWith('gce://')) {
    throw new InvalidInputError(`providerID "${providerID}" is not a GCE providerID: ${expected}`);
  }
  const parts = providerID.slice('gce://'.length).split('/');
  const [project, zone, name] = parts;
  if (parts.length !== 3 || !project || !zone || !name) {
    throw new InvalidInputError(`providerID "${providerID}" is malformed: ${expected}`);
  }
  if (!projectPattern.test(project))
    throw new InvalidInputError(`providerID "${providerID}": invalid project "${project}"`);
  if (!zonePattern.test(zone))
    throw new InvalidInputError(`providerID "${providerID}": invalid zone "${zone}"`);
  if (!namePattern.test(name))
    throw new InvalidInputError(`providerID "${providerID}": invalid instance name "${name}"`);
  return { project, zone, name };
}

/** Formats the providerID of an instance. */
export function formatGceProviderID(ref: GceInstanceRef): string {
  return `gce://${ref.project}/${ref.zone}/${ref.name}`;
}

/** A zonal MIG named by `created-by`: `projects/<project-number>/zones/<zone>/instanceGroupManagers/<name>`. */
export interface MigRef {
  /** The project as written in `created-by` (MIGs write the project number). */
  project: string;
  zone: string;
  name: string;
}

/**
 * Parses the `created-by` metadata of an instance. Returns undefined for anything that is not a zonal
 * MIG (regional MIGs are not what kops creates, and any other value is not a MIG at all).
 */
export function parseCreatedBy(value: string): MigRef | undefined {
  const match =
    /^(?:https:\/\/www\.googleapis\.com\/compute\/v1\/)?projects\/([^/]+)\/zones\/([^/]+)\/instanceGroupManagers\/([^/]+)$/.exec(
      value.trim(),
    );
  if (!match) return undefined;
  const [, project, zone, name] = match as unknown as [string, string, string, string];
  if (!projectPattern.test(project) || !zonePattern.test(zone) || !namePattern.test(name)) return undefined;
  return { project, zone, name };
}

/** A global instance template named by a URL. */
export interface TemplateRef {
  project: string;
  name: string;
}

/** Parses a global instance-template URL; undefined when it is not one (e.g. a regional template). */
export function parseTemplateUrl(url: string): TemplateRef | undefined {
  const match = /(?:^|\/)projects\/([^/]+)\/global\/instanceTemplates\/([^/]+)$/.exec(url);
  if (!match) return undefined;
  const [, project, name] = match as unknown as [string, string, string];
  if (!projectPattern.test(project) || !namePattern.test(name)) return undefined;
  return { project, name };
}

/** Parses a zonal resource URL (`…/projects/<p>/zones/<z>/<collection>/<name>`). */
export function parseZonalUrl(
  url: string,
): { project: string; zone: string; collection: string; name: string } | undefined {
  const match = /(?:^|\/)projects\/([^/]+)\/zones\/([^/]+)\/([^/]+)\/([^/]+)$/.exec(url);
  if (!match) return undefined;
  const [, project, zone, collection, name] = match as unknown as [string, string, string, string, string];
  return { project, zone, collection, name };
}
