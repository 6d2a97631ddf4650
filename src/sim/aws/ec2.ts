/**
 * The simulated EC2 `DescribeInstances` and `DescribeLaunchTemplates`, answering in EC2's own XML:
 * ids, names and filters, `MaxResults`/`NextToken` paging, and the `NotFound` / `Malformed` errors as
 * EC2 raises them.
 */
import { randomUUID } from 'node:crypto';
import { pageOf } from './paging.ts';
import {
  AwsSimError,
  filterParams,
  listParam,
  type QueryFilter,
  tagFilterMatches,
  wildcardMatch,
} from './query.ts';
import {
  type AwsWorld,
  ec2StateCodes,
  isInstanceId,
  isLaunchTemplateId,
  type SimInstance,
  type SimLaunchTemplate,
} from './world.ts';
import { document, el, list, wrap } from './xml.ts';

/** The XML namespace of the EC2 API version the SDK speaks. */
export const ec2Namespace = 'http://ec2.amazonaws.com/doc/2016-11-15/';

/** EC2 rejects more ids than this in one request. */
export const maxInstanceIdsPerCall = 1000;

function filterMatches(filter: QueryFilter, instance: SimInstance): boolean {
  const byTag = tagFilterMatches(filter, instance.tags);
  if (byTag !== undefined) return byTag;
  const field = ((): string | undefined => {
    switch (filter.name) {
      case 'instance-id':
        return instance.id;
      case 'instance-state-name':
        return instance.state;
      case 'instance-state-code':
        return String(ec2StateCodes[instance.state]);
      case 'availability-zone':
        return instance.zone;
      case 'private-ip-address':
        return instance.privateIp;
      case 'private-dns-name':
        return instance.privateDnsName;
      case 'instance-lifecycle':
        return instance.lifecycle;
      case 'instance-type':
        return instance.instanceType;
      default:
        throw new AwsSimError('InvalidParameterValue', `The filter '${filter.name}' is invalid`);
    }
  })();
  return field !== undefined && filter.values.some((v) => wildcardMatch(v, field));
}

function notFound(missing: readonly string[]): AwsSimError {
  const quoted = missing.join(', ');
  return new AwsSimError(
    'InvalidInstanceID.NotFound',
    missing.length === 1
      ? `The instance ID '${quoted}' does not exist`
      : `The instance IDs '${quoted}' do not exist`,
  );
}

/** The addresses EC2 lists on an instance's primary ENI. */
function primaryAddresses(i: SimInstance): string {
  const ipv6 = i.ipv6 === undefined ? [] : [i.ipv6];
  let xml =
    el('privateIpAddress', i.privateIp) +
    el('privateDnsName', i.privateDnsName) +
    list(
      'privateIpAddressesSet',
      'item',
      [i.privateIp],
      (ip) => el('privateIpAddress', ip) + el('primary', true),
    ) +
    list('ipv6AddressesSet', 'item', ipv6, (ip) => el('ipv6Address', ip));
  if (i.publicIp !== undefined)
    xml += wrap('association', el('publicIp', i.publicIp) + el('ipOwnerId', 'amazon'));
  return xml;
}

/** One ENI item of an instance's `networkInterfaceSet`; the primary one (device index 0) carries its addresses. */
function renderNetworkInterface(
  i: SimInstance,
  deviceIndex: number,
  ipv6Prefixes: readonly string[],
): string {
  const suffix = deviceIndex === 0 ? '' : `-${deviceIndex}`;
  let xml = el('networkInterfaceId', `eni-${i.id.slice(2)}${suffix}`);
  if (deviceIndex === 0) xml += primaryAddresses(i);
  xml +=
    list('ipv6PrefixSet', 'item', ipv6Prefixes, (prefix) => el('ipv6Prefix', prefix)) +
    wrap('attachment', el('deviceIndex', deviceIndex) + el('status', 'attached'));
  return wrap('item', xml);
}

function renderInstance(world: AwsWorld, i: SimInstance): string {
  const tags = Object.entries(i.tags);
  const networkInterfaces =
    renderNetworkInterface(i, 0, i.ipv6Prefixes ?? []) +
    (i.secondaryNetworkInterfaces ?? [])
      .map((eni, n) => renderNetworkInterface(i, n + 1, eni.ipv6Prefixes ?? []))
      .join('');
  return (
    el('instanceId', i.id) +
    el('imageId', 'ami-0123456789abcdef0') +
    wrap('instanceState', el('code', ec2StateCodes[i.state]) + el('name', i.state)) +
    el('privateDnsName', i.privateDnsName) +
    (i.publicDnsName === undefined ? '<dnsName/>' : el('dnsName', i.publicDnsName)) +
    el('amiLaunchIndex', 0) +
    el('instanceType', i.instanceType) +
    el('launchTime', i.launchTime.toISOString()) +
    wrap('placement', el('availabilityZone', i.zone) + el('groupName', '') + el('tenancy', 'default')) +
    wrap('monitoring', el('state', 'disabled')) +
    el('privateIpAddress', i.privateIp) +
    el('ipAddress', i.publicIp) +
    el('architecture', 'x86_64') +
    el('rootDeviceType', 'ebs') +
    el('instanceLifecycle', i.lifecycle) +
    list('tagSet', 'item', tags, ([k, v]) => el('key', k) + el('value', v)) +
    wrap('networkInterfaceSet', networkInterfaces) +
    el('ownerId', world.account)
  );
}

/** Handles `DescribeInstances`; returns the response document. */
export function describeInstances(world: AwsWorld, params: ReadonlyMap<string, string>): string {
  const ids = listParam(params, 'InstanceId');
  const filters = filterParams(params, 'ec2');
  if (ids.length > 0 && params.has('MaxResults')) {
    throw new AwsSimError(
      'InvalidParameterCombination',
      'The parameter instancesSet cannot be used with the parameter maxResults',
    );
  }
  if (ids.length > maxInstanceIdsPerCall) {
    throw new AwsSimError(
      'InvalidParameterValue',
      `No more than ${maxInstanceIdsPerCall} instance IDs may be given in one request`,
    );
  }
  const malformed = ids.find((id) => !isInstanceId(id));
  if (malformed !== undefined)
    throw new AwsSimError('InvalidInstanceID.Malformed', `Invalid id: "${malformed}"`);
  let candidates: SimInstance[];
  if (ids.length > 0) {
    const unique = [...new Set(ids)];
    const missing = unique.filter((id) => !world.listsInstance(id));
    if (missing.length > 0) throw notFound(missing);
    candidates = unique.map((id) => world.instance(id) as SimInstance);
  } else {
    candidates = world.instances();
  }
  const matching = candidates.filter((i) => filters.every((f) => filterMatches(f, i)));
  const { page, nextToken } = pageOf(matching, params, {
    param: 'MaxResults',
    min: 5,
    max: 1000,
    default: Number.MAX_SAFE_INTEGER,
  });
  const reservations = list(
    'reservationSet',
    'item',
    page,
    (i) =>
      el('reservationId', `r-${i.id.slice(2)}`) +
      el('ownerId', world.account) +
      '<groupSet/>' +
      list('instancesSet', 'item', [i], (x) => renderInstance(world, x)),
  );
  return document(
    'DescribeInstancesResponse',
    ec2Namespace,
    el('requestId', randomUUID()) + reservations + el('nextToken', nextToken),
  );
}

function launchTemplateFilterMatches(filter: QueryFilter, template: SimLaunchTemplate): boolean {
  const byTag = tagFilterMatches(filter, template.tags);
  if (byTag !== undefined) return byTag;
  if (filter.name !== 'launch-template-name') {
    throw new AwsSimError('InvalidParameterValue', `The filter '${filter.name}' is invalid`);
  }
  return filter.values.some((v) => wildcardMatch(v, template.name));
}

/** The templates a request names by id or name (all when it names none); EC2 refuses unknown ones. */
function namedLaunchTemplates(world: AwsWorld, params: ReadonlyMap<string, string>): SimLaunchTemplate[] {
  const ids = listParam(params, 'LaunchTemplateId');
  const names = listParam(params, 'LaunchTemplateName');
  if (ids.length === 0 && names.length === 0) return world.launchTemplates();
  const malformed = ids.find((id) => !isLaunchTemplateId(id));
  if (malformed !== undefined) {
    throw new AwsSimError(
      'InvalidLaunchTemplateId.Malformed',
      `The specified ID for the launch template (${malformed}) is malformed`,
    );
  }
  const missing = 'At least one of the launch templates specified in the request does not exist.';
  const byId = ids.map((id) => world.launchTemplate(id));
  if (byId.includes(undefined)) throw new AwsSimError('InvalidLaunchTemplateId.NotFound', missing);
  const byName = names.map((name) => world.launchTemplates().find((t) => t.name === name));
  if (byName.includes(undefined))
    throw new AwsSimError('InvalidLaunchTemplateName.NotFoundException', missing);
  return [...new Set([...byId, ...byName] as SimLaunchTemplate[])];
}

/** Handles `DescribeLaunchTemplates`; returns the response document. */
export function describeLaunchTemplates(world: AwsWorld, params: ReadonlyMap<string, string>): string {
  const filters = filterParams(params, 'ec2');
  const matching = namedLaunchTemplates(world, params).filter((t) =>
    filters.every((f) => launchTemplateFilterMatches(f, t)),
  );
  const { page, nextToken } = pageOf(matching, params, {
    param: 'MaxResults',
    min: 1,
    max: 200,
    default: Number.MAX_SAFE_INTEGER,
  });
  const templates = list(
    'launchTemplates',
    'item',
    page,
    (t) =>
      el('createTime', t.createTime.toISOString()) +
      el('createdBy', `arn:aws:iam::${world.account}:root`) +
      el('defaultVersionNumber', t.defaultVersion) +
      el('latestVersionNumber', t.latestVersion) +
      el('launchTemplateId', t.id) +
      el('launchTemplateName', t.name) +
      list('tagSet', 'item', Object.entries(t.tags), ([k, v]) => el('key', k) + el('value', v)),
  );
  return document(
    'DescribeLaunchTemplatesResponse',
    ec2Namespace,
    el('requestId', randomUUID()) + templates + el('nextToken', nextToken),
  );
}

/** An EC2 error document (EC2 does not use the awsQuery `ErrorResponse` shape). */
export function ec2ErrorDocument(code: string, message: string): string {
  return (
    '<?xml version="1.0" encoding="UTF-8"?>\n' +
    wrap(
      'Response',
      wrap('Errors', wrap('Error', el('Code', code) + el('Message', message))) +
        el('RequestID', randomUUID()),
    )
  );
}
