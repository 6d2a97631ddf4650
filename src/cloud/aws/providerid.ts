/**
 * AWS providerIDs, as the AWS cloud provider writes them into `Node.spec.providerID`:
 * `aws:///<availability-zone>/<instance-id>`. kops accepts exactly this form (three slashes, three
 * `/`-separated parts after `aws://`), and so do we; the zone is kept so it can be checked against
 * the instance's real zone.
 */
import { InvalidInputError } from '../../errors.ts';

/** The parts of an AWS providerID. */
export interface AwsProviderID {
  zone: string;
  instanceId: string;
}

const zonePattern = /^[a-z][a-z0-9-]{0,62}[a-z0-9]$/;
const instanceIdPattern = /^i-(?:[0-9a-f]{8}|[0-9a-f]{17})$/;
const form = 'aws:///<availability-zone>/<instance-id>';

/** Parses `aws:///<zone>/<instance-id>`; throws InvalidInputError saying what is wrong otherwise. */
export function parseAwsProviderID(providerID: string): AwsProviderID {
  const shown = JSON.stringify(providerID.length > 120 ? `${providerID.slice(0, 120)}…` : providerID);
  if (providerID === '') {
    throw new InvalidInputError(`the node has no providerID; the AWS cloud provider sets it to ${form}`);
  }
  if (!providerID.startsWith('aws://')) {
    throw new InvalidInputError(`providerID ${shown} is not an AWS providerID (${form})`);
  }
  const parts = providerID.slice('aws://'.length).split('/');
  if (parts.length !== 3 || parts[0] !== '') {
    throw new InvalidInputError(`providerID ${shown} is malformed: expected ${form}, with three slashes`);
  }
  const [, zone, instanceId] = parts as [string, string, string];
  if (!zonePattern.test(zone)) {
    throw new InvalidInputError(`providerID ${shown} has no valid availability zone: expected ${form}`);
  }
  if (!instanceIdPattern.test(instanceId)) {
    throw new InvalidInputError(
      `providerID ${shown} has an invalid instance id: expected i- and 8 or 17 hexadecimal digits`,
    );
  }
  return { zone, instanceId };
}

/** Formats the providerID of an instance in a zone. */
export function formatAwsProviderID(zone: string, instanceId: string): string {
  return `aws:///${zone}/${instanceId}`;
}
