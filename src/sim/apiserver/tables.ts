/**
 * Server-side printing: the `meta.k8s.io/v1` Table kubectl asks for with
 * `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`, with the columns kubectl shows for the
 * common kinds and Name/Age for the rest.
 */
import { isRecord, type KubeObject } from './objects.ts';
import type { ResourceType } from './resources.ts';
import type { StoredEntry } from './store.ts';

interface Column {
  name: string;
  type: string;
  format?: string;
  value: (obj: KubeObject) => string | number;
}

/** Whether an Accept header asks for a Table. */
export function wantsTable(accept: string | undefined): boolean {
  return accept !== undefined && /as=Table/.test(accept) && /g=meta\.k8s\.io/.test(accept);
}

/** A duration the way kubectl prints ages (`45s`, `3m20s`, `5h`, `12d`). */
export function humanAge(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 120) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 10) return s % 60 === 0 ? `${m}m` : `${m}m${s % 60}s`;
  if (m < 180) return `${m}m`;
  const h = Math.floor(m / 60);
  if (h < 8) return m % 60 === 0 ? `${h}h` : `${h}h${m % 60}m`;
  if (h < 48) return `${h}h`;
  const d = Math.floor(h / 24);
  if (d < 8) return h % 24 === 0 ? `${d}d` : `${d}d${h % 24}h`;
  return `${d}d`;
}

const nameColumn: Column = {
  name: 'Name',
  type: 'string',
  format: 'name',
  value: (o) => o.metadata.name ?? '',
};
const ageColumn: Column = {
  name: 'Age',
  type: 'string',
  value: (o) =>
    o.metadata.creationTimestamp
      ? humanAge(Date.now() - Date.parse(o.metadata.creationTimestamp))
      : '<unknown>',
};

function section(obj: Record<string, unknown>, key: string): Record<string, unknown> {
  const value = obj[key];
  return isRecord(value) ? value : {};
}

function conditions(obj: KubeObject): Record<string, unknown>[] {
  const list = section(obj, 'status')['conditions'];
  return Array.isArray(list) ? list.filter(isRecord) : [];
}

function nodeStatus(obj: KubeObject): string {
  const ready = conditions(obj).find((c) => c['type'] === 'Ready');
  const parts = [ready?.['status'] === 'True' ? 'Ready' : ready ? 'NotReady' : 'Unknown'];
  if (section(obj, 'spec')['unschedulable'] === true) parts.push('SchedulingDisabled');
  return parts.join(',');
}

function nodeRoles(obj: KubeObject): string {
  const roles = Object.keys(obj.metadata.labels ?? {})
    .filter((k) => k.startsWith('node-role.kubernetes.io/'))
    .map((k) => k.slice('node-role.kubernetes.io/'.length))
    .filter(Boolean);
  return roles.length ? roles.sort().join(',') : '<none>';
}

function podReady(obj: KubeObject): string {
  const containers = section(obj, 'spec')['containers'];
  const statuses = section(obj, 'status')['containerStatuses'];
  const total = Array.isArray(containers) ? containers.length : 0;
  const ready = Array.isArray(statuses)
    ? statuses.filter((s) => isRecord(s) && s['ready'] === true).length
    : 0;
  return `${ready}/${total}`;
}

function csrCondition(obj: KubeObject): string {
  const types = conditions(obj).map((c) => String(c['type']));
  const parts = types.length ? types : ['Pending'];
  if (section(obj, 'status')['certificate']) parts.push('Issued');
  return parts.join(',');
}

const columnsByType: Record<string, Column[]> = {
  nodes: [
    nameColumn,
    { name: 'Status', type: 'string', value: nodeStatus },
    { name: 'Roles', type: 'string', value: nodeRoles },
    ageColumn,
    {
      name: 'Version',
      type: 'string',
      value: (o) => String(section(section(o, 'status'), 'nodeInfo')['kubeletVersion'] ?? ''),
    },
  ],
  pods: [
    nameColumn,
    { name: 'Ready', type: 'string', value: podReady },
    { name: 'Status', type: 'string', value: (o) => String(section(o, 'status')['phase'] ?? '') },
    { name: 'Restarts', type: 'integer', value: () => 0 },
    ageColumn,
  ],
  namespaces: [
    nameColumn,
    { name: 'Status', type: 'string', value: (o) => String(section(o, 'status')['phase'] ?? '') },
    ageColumn,
  ],
  certificatesigningrequests: [
    nameColumn,
    ageColumn,
    { name: 'SignerName', type: 'string', value: (o) => String(section(o, 'spec')['signerName'] ?? '') },
    { name: 'Requestor', type: 'string', value: (o) => String(section(o, 'spec')['username'] ?? '') },
    { name: 'Condition', type: 'string', value: csrCondition },
  ],
};

function columnsOf(type: ResourceType): Column[] {
  return columnsByType[type.plural] ?? [nameColumn, ageColumn];
}

function row(columns: Column[], entry: StoredEntry): Record<string, unknown> {
  const meta = entry.object.metadata;
  return {
    cells: columns.map((c) => c.value(entry.object)),
    object: { kind: 'PartialObjectMetadata', apiVersion: 'meta.k8s.io/v1', metadata: meta },
  };
}

/** A Table of entries, as the JSON text kubectl decodes. */
export function tableJson(
  type: ResourceType,
  entries: readonly StoredEntry[],
  resourceVersion: number,
  continueToken?: string,
): string {
  const columns = columnsOf(type);
  const metadata: Record<string, unknown> = { resourceVersion: String(resourceVersion) };
  if (continueToken) metadata['continue'] = continueToken;
  return JSON.stringify({
    kind: 'Table',
    apiVersion: 'meta.k8s.io/v1',
    metadata,
    columnDefinitions: columns.map((c) => ({
      name: c.name,
      type: c.type,
      format: c.format ?? '',
      description: '',
      priority: 0,
    })),
    rows: entries.map((e) => row(columns, e)),
  });
}
